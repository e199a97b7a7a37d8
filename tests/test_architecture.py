"""The package's import structure, read from the source with `ast` (imports inside functions
included): no import cycle among codesign modules, no private name imported from another module,
no package importing one of a higher layer (docs/architecture.md), nothing imported from
experiments/ or paper_figures/; and no public function or class used only by tests."""

from __future__ import annotations

import ast
import collections
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "codesign"

LAYERS = {
    "graph": 0, "results": 0,
    "hwmodel": 1, "kernels": 1, "quant": 1,
    "sparsify": 2, "data": 2,
    "models": 3, "vertex": 3,
    "train": 4,
    "baselines": 5, "distributed": 5, "deploy": 5, "checkpoint": 5, "experiment": 5, "bench": 5,
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


def test_codesign_imports_neither_experiments_nor_paper_figures():
    """The package is the library; experiments/ and paper_figures/ are its users, never the reverse."""
    banned = ("experiments", "paper_figures")
    offenders = []
    for m, p in MODULES.items():
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{m} imports {n}" for n in names if n.split(".")[0] in banned]
    assert not offenders, offenders


# ------------------------------------------------------------------------------ dead public code

USER_ROOTS = ("codesign", "experiments", "paper_figures")
"""Where a public name must be used (as code: an ``ast.Name`` or attribute, not a docstring)."""
DOC_FILES = ("README.md", "docs/*.md", "experiments/*.md")
"""Markdown whose fenced code blocks also count as uses."""

EXCEPTIONS = {
    "codesign.kernels.pallas_csr.with_csr_chunks": "the only way to opt a CooAdjacency into aggregate's "
                                                  "'pallas_csr' impl (api.py dispatches on an attached CsrChunks)",
    "codesign.kernels.pallas_csr.gcn_scales": "GCN normalization as csr_chunk_spmm's row/col scales "
                                             "(docs/log/kernels_gpu_plan.md)",
    "codesign.kernels.pallas_csr.csr_chunk_spmm_int8_reference": "plain-JAX oracle of the int8 CSR kernel, "
                                                                "documented beside it (docs/log/kernels_gpu_plan.md)",
    "codesign.kernels.pallas_spmm.bsr_spmm_int8_reference": "plain-JAX oracle of the int8 BSR kernel, the "
                                                           "contract quantize_rows_int8's features are checked by",
    "codesign.hwmodel.presets.power_limit_table": "regenerates docs/hwmodel.md's power table by hand "
                                                 "(a test checks the docs are current)",
}
"""Public names used only by tests that are still public API a user imports: ``{qualified name: why}``."""


def _public_definitions() -> dict[str, str]:
    """``{qualified name: name}`` of every public top-level function and class in codesign/."""
    out = {}
    for m, p in MODULES.items():
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                out[f"{m}.{node.name}"] = node.name
    return out


def _used_names() -> set[str]:
    """Identifiers used as code outside tests/: names and attributes in the .py files of
    `USER_ROOTS` (a top-level definition's own body does not count for its own name; imports,
    ``__all__`` strings and docstrings never count) and the words of the fenced code blocks of
    `DOC_FILES`. Matching is by name, not resolved per module: a name defined twice is used
    when either is."""
    used = set()
    for root in USER_ROOTS:
        for p in (ROOT / root).rglob("*.py"):
            for top in ast.parse(p.read_text()).body:
                own = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else None
                for node in ast.walk(top):
                    name = (node.id if isinstance(node, ast.Name)
                            else node.attr if isinstance(node, ast.Attribute) else None)
                    if name is not None and name != own:
                        used.add(name)
    for pattern in DOC_FILES:
        for p in ROOT.glob(pattern):
            for block in re.findall(r"```[^\n]*\n(.*?)```", p.read_text(), re.S):
                used.update(re.findall(r"\w+", block))
    return used


def test_every_public_definition_is_used_outside_tests():
    """Dead or test-only code is removed or wired into a real path; `EXCEPTIONS` names the rest."""
    defs, used = _public_definitions(), _used_names()
    dead = sorted(q for q, name in defs.items() if name not in used and q not in EXCEPTIONS)
    assert not dead, ("public, but used only by tests (or nothing): remove them, use them, or add them to "
                      f"EXCEPTIONS with a reason: {dead}")
    stale = sorted(q for q in EXCEPTIONS if q not in defs or defs[q] in used)
    assert not stale, f"EXCEPTIONS entries no longer defined or now used (remove them): {stale}"


# ------------------------------------------------------------------------------ abstract or final

CONCRETE_BASES = {
    "codesign.data.planetoid._NoInit": "private pickle guard mixed into two scipy sparse subclasses (not a contract)",
    "codesign.train.config._Section": "private dataclass base sharing the sections' __post_init__ domain check",
    "codesign.vertex.trace._Proxy": "private tracer proxy sharing the numpy refusals of v / u / e",
}
"""Concrete classes of codesign/ that other classes of codesign/ subclass: ``{qualified name: why}``."""

NOT_YET_FINAL: dict[str, str] = {}
"""Concrete subclasses of a codesign class not yet marked ``@final``: ``{qualified name: why}``."""

OVERRIDDEN_DEFAULTS = {
    "codesign.models.base.GNN.layer_bits": "default: every Quantizer by its path; GCN, GAT and GraphSAGE name "
                                           "their tensors (x0, w0, x1, w1) for the records",
    "codesign.models.base.GNN.takes_sparse_input": "default: False (dense input); GCN says when its first layer "
                                                   "keeps zeros zero, so training may run on the input's nonzeros",
}
"""Concrete methods of an abstract base that subclasses override: ``{qualified name: why}``."""


def _classes() -> dict[str, type]:
    """``{qualified name: class}`` of every class defined in codesign/ (modules imported)."""
    import importlib
    import inspect
    out = {}
    for m in MODULES:
        mod = importlib.import_module(m)
        out.update({f"{c.__module__}.{c.__qualname__}": c for c in vars(mod).values()
                    if inspect.isclass(c) and c.__module__ == m})
    return out


def _name(c: type) -> str:
    return f"{c.__module__}.{c.__qualname__}"


def test_contracts_are_abstract_bases_not_protocols():
    """One contract style: abstract base classes (`abc`), no `typing.Protocol`."""
    protocols = sorted(q for q, c in _classes().items() if getattr(c, "_is_protocol", False))
    assert not protocols, f"typing.Protocol classes (make them abc abstract bases): {protocols}"


def test_abstract_or_final():
    """Equinox's rule: a class of codesign/ that another class of codesign/ subclasses is abstract
    (it has abstract methods, so it cannot be instantiated), every concrete subclass is ``@final``,
    and no subclass overrides a concrete method of its abstract base; `CONCRETE_BASES`,
    `NOT_YET_FINAL` and `OVERRIDDEN_DEFAULTS` name the exceptions."""
    import inspect
    classes = _classes()
    bases = {_name(b) for c in classes.values() for b in c.__bases__ if _name(b) in classes}
    concrete_bases = sorted(q for q in bases if not inspect.isabstract(classes[q]) and q not in CONCRETE_BASES)
    assert not concrete_bases, f"concrete classes subclassed in codesign/ (make them abstract): {concrete_bases}"
    not_final = sorted(q for q, c in classes.items() if q not in NOT_YET_FINAL and not inspect.isabstract(c)
                       and not getattr(c, "__final__", False) and any(_name(b) in classes for b in c.__bases__))
    assert not not_final, f"concrete subclasses of a codesign class not marked @final: {not_final}"
    overrides = sorted({f"{_name(b)}.{n}" for c in classes.values() for b in c.__mro__[1:]
                        if _name(b) in classes and inspect.isabstract(b)
                        for n, v in vars(b).items() if not n.startswith("__") and n in vars(c)
                        and (callable(v) or isinstance(v, property)) and not getattr(v, "__isabstractmethod__", False)}
                       - set(OVERRIDDEN_DEFAULTS))
    assert not overrides, f"concrete methods of an abstract base overridden (wrap instead): {overrides}"
    stale = sorted(q for q in [*CONCRETE_BASES, *NOT_YET_FINAL] if q not in classes
                   or (q in NOT_YET_FINAL and getattr(classes[q], "__final__", False))
                   or (q in CONCRETE_BASES and (q not in bases or inspect.isabstract(classes[q]))))
    assert not stale, f"exceptions no longer needed (remove them): {stale}"


def test_an_abstract_base_refuses_an_incomplete_subclass():
    """The contracts are enforced at construction, not probed: a mask or quantizer missing a method
    cannot be made."""
    import pytest
    from flax import nnx

    from codesign.quant import Quantizer
    from codesign.sparsify import EdgeSparsifier, LastAxisMask

    class HalfEdgeMask(EdgeSparsifier):
        def expected_density(self):
            return 1.0

    class HalfQuantizer(Quantizer):
        def __call__(self, x):
            return x

    for cls, args in ((HalfEdgeMask, ()), (HalfQuantizer, ()), (LastAxisMask, (3,))):
        with pytest.raises(TypeError, match="abstract"):
            cls(*args, **({"rngs": nnx.Rngs(0)} if cls is LastAxisMask else {}))
