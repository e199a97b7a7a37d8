"""Plot styles of the methods in every figure: ``{method: {"label", "color", "marker"}}``
(matplotlib colours and markers; co-design filled, baselines hollow). Presentation, not library:
`codesign.experiment.PAPER_METHODS` holds what the methods train, this module how they are drawn."""

from __future__ import annotations

STYLES = {
    'dense': dict(label='dense FP32', color='k', marker='*'),
    'codesign': dict(label='co-design (edge+feature+channel gates, learned bits)', color='#b2182b', marker='o'),
    'codesign_a2q': dict(label='co-design, A2Q per-node bits', color='#d6604d', marker='8'),
    'codesign_v1': dict(label='co-design v1 (edges+features+channels+bits)', color='#f4a582', marker='o'),
    'codesign_int8': dict(label='co-design: features+channels, INT8', color='#ef8a62', marker='h'),
    'codesign_cpu': dict(label='co-design for a CPU: edges+features+channels, FP32, CSR features, distilled',
                         color='#67001f', marker='p'),
    'edge_only': dict(label='co-design: edges only', color='C1', marker='s'),
    'quant_only': dict(label='co-design: bits only', color='C6', marker='D'),
    'codesign_no_edges': dict(label='codesign − edge gates', color='#8c510a', marker='s'),
    'codesign_no_features': dict(label='codesign − feature/channel gates', color='#bf812d', marker='D'),
    'codesign_no_bits': dict(label='codesign − learned bits (FP32)', color='#35978f', marker='^'),
    'codesign_no_distill': dict(label='codesign − distillation', color='#01665e', marker='v'),
    'ugs_int8': dict(label='UGS + INT8', color='C0', marker='P'),
    'degree_quant': dict(label='Degree-Quant', color='C2', marker='X'),
    'a2q': dict(label='A2Q (per-node learned bits)', color='C4', marker='d'),
    'int8': dict(label='INT8 (PTQ/QAT)', color='C7', marker='v'),
    'int4': dict(label='INT4', color='C5', marker='^'),
    'random_edges': dict(label='random edge removal', color='C8', marker='<'),
    'random_edges_distill': dict(label='random edge removal, distilled', color='C8', marker='>'),
    'dropedge': dict(label='DropEdge', color='C9', marker='>'),
}

UNKNOWN = dict(color="0.4", marker=".")
"""The style of a method not in `STYLES` (a grey dot labelled by its name)."""


def method_style(method: str) -> dict:
    """``{"color", "marker", "label"}`` of ``method``: its `STYLES` entry, else `UNKNOWN` labelled by
    its name."""
    return dict(STYLES.get(method) or dict(UNKNOWN, label=method))
