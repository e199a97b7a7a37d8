"""The README's Python example runs as written, and its commands name real CLI options."""

import pathlib
import re

from codesign.cli import build_parser

README = (pathlib.Path(__file__).parent.parent / "README.md").read_text()


def test_readme_python_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "README has no python example"
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_readme_codesign_commands_parse():
    commands = re.findall(r"`?(codesign (?:train|sweep|cost)[^`&\n]*)", README)
    assert len(commands) >= 3
    for cmd in commands:
        # "<name>": any model of the registry (--model has choices now)
        build_parser().parse_args(cmd.split("#")[0].replace("<name>", "gcn").split()[1:])
