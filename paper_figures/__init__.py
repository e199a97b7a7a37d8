"""Scripts that draw the paper's figures from ``results/*.jsonl`` (matplotlib, PNG + PDF).

Each module is runnable (``python paper_figures/<name>.py ...``) and importable from the
repository root (``from paper_figures.pareto import pareto_front``).
"""
