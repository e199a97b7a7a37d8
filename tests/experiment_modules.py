"""The one way tests import a script of ``experiments/`` (not a package): `load`."""

import importlib.util
import pathlib
import sys

EXPERIMENTS = pathlib.Path(__file__).resolve().parent.parent / "experiments"


def load(name: str):
    """The module ``experiments/<name>.py``, executed once per call and registered as ``name`` in
    ``sys.modules`` (dataclasses resolve string annotations through it)."""
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
