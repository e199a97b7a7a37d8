"""The Python examples of README.md and docs/guide.md run as written, and their commands name real CLI
options."""

import pathlib
import re

import pytest

from codesign.cli import build_parser

ROOT = pathlib.Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
GUIDE = (ROOT / "docs" / "guide.md").read_text()
DOCS = {"README.md": README, "docs/guide.md": GUIDE}


@pytest.mark.parametrize("name", DOCS)
def test_python_examples_run(name):
    blocks = re.findall(r"```python\n(.*?)```", DOCS[name], re.S)
    assert blocks, f"{name} has no python example"
    for code in blocks:
        exec(compile(code, name, "exec"), {})


@pytest.mark.parametrize("name", DOCS)
def test_codesign_commands_parse(name):
    commands = re.findall(r"`?(codesign (?:train|sweep|cost)[^`&\n]*)", DOCS[name])
    assert len(commands) >= 3
    for cmd in commands:
        # "<name>": any model of the registry (--model has choices now)
        build_parser().parse_args(cmd.split("#")[0].replace("<name>", "gcn").split()[1:])
