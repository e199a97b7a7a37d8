"""The package's import structure, read from the source with `ast` (imports inside functions
included): no import cycle among codesign modules, no private name imported from another module,
and no package importing one of a higher layer (docs/architecture.md)."""

from __future__ import annotations

import ast
import collections
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "codesign"

LAYERS = {
    "graph": 0, "results": 0,
    "hwmodel": 1, "kernels": 1, "quant": 1,
    "sparsify": 2, "data": 2,
    "models": 3, "vertex": 3,
    "train": 4,
    "baselines": 5, "distributed": 5, "deploy": 5, "checkpoint": 5, "experiment": 5, "bench": 5,
    "bench_train": 5, "bench_pyg_child": 5,
    "cli": 6,
}
"""Layer of each top-level module or package of codesign: a module may import from its own layer
or a lower one."""


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    while name and name not in MODULES:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    return name


def _imports(path: pathlib.Path):
    """``(imported module, imported name or None)`` for every codesign import in ``path``."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("codesign"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in MODULES:
                    yield sub, None
                else:
                    yield _resolve(node.module), alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("codesign"):
                    yield _resolve(alias.name), None


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _graph() -> dict[str, set[str]]:
    edges = collections.defaultdict(set)
    for m, p in MODULES.items():
        for target, _ in _imports(p):
            if target and target != m:
                edges[m].add(target)
    return edges


def test_every_module_has_a_layer():
    tops = {_top(m) for m in MODULES if m != "codesign"}
    assert tops <= set(LAYERS), f"give these a layer in LAYERS: {sorted(tops - set(LAYERS))}"


def test_no_import_cycle():
    edges = _graph()
    # a package's __init__ re-exports its modules: a module importing its own package's face is
    # not a cycle through the package, so edges into one's own package __init__ are ignored
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(edges.get(m, ())):
            if state.get(t) == "open":
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(MODULES):
        if m not in state:
            visit(m)
    assert not cycles, f"import cycles: {cycles}"


def test_no_private_name_is_imported_from_another_module():
    offenders = [f"{m} imports {target}.{name}" for m, p in MODULES.items() for target, name in _imports(p)
                 if name and name.startswith("_") and not name.startswith("__") and target != m]
    assert not offenders, offenders


def test_no_upward_import():
    offenders = sorted(f"{m} ({LAYERS[_top(m)]}) imports {t} ({LAYERS[_top(t)]})"
                       for m, ts in _graph().items() for t in ts
                       if m != "codesign" and _top(t) in LAYERS and LAYERS[_top(t)] > LAYERS[_top(m)])
    assert not offenders, offenders
