"""README.md and docs/**/*.md are references: every relative markdown link ``[text](path)`` outside code
names a file or folder that exists, and a ``path.md#anchor`` a heading of that file (GitHub's slugs);
http(s), mailto and same-page ``#anchor`` links are not checked. README.md stays short (<= 8 KB; the
detail lives in docs/guide.md)."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)  # `map[name](args)` is code, not a link


def relative_links(path: pathlib.Path) -> list[str]:
    """The relative link targets of one markdown file, outside code blocks and code spans, as written
    (``path`` or ``path#anchor``)."""
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text()))
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith(("#", "//")):
            continue  # http(s)://, mailto:, ... and same-page anchors
        if not target.startswith("#"):
            targets.append(target)
    return targets


def anchors(path: pathlib.Path) -> set[str]:
    """GitHub's heading anchors of a markdown file: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    missing = []
    for link in relative_links(doc):
        path, _, anchor = link.partition("#")
        target = doc.parent / path
        if not target.exists():
            missing.append(link)
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            missing.append(link)  # a file that exists, a heading that does not
    assert not missing, f"{doc.relative_to(ROOT)}: links to missing files or headings {missing}"


def test_links_are_found():
    links = relative_links(ROOT / "README.md")
    assert "docs/guide.md" in links and "docs/guide.md#command-line" in links
    assert "command-line" in anchors(ROOT / "docs" / "guide.md")


def test_readme_is_at_most_8_kb():
    size = (ROOT / "README.md").stat().st_size
    assert size <= 8192, f"README.md is {size} bytes (> 8192): move detail to docs/guide.md"
