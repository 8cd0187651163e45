"""The docs a newcomer reads hold: every relative link resolves, every command's options exist.

README.md and docs/*.md: a link to a file of the repository names one that
exists (and a heading of it that exists, for ``file.md#heading``), and every
``--restore-*`` option in a command block is one the plugin declares.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_OPTION = re.compile(r"(?<![\w-])--restore(?:-[a-z0-9]+)*")


def _prose(text: str) -> str:
    """The text outside fenced blocks (a link inside a code block is code, not a link)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (outside code blocks)."""
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", _prose(path.read_text()), re.MULTILINE)}


def test_the_readme_is_read_in_five_minutes() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(doc.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue  # a URL: not ours to check offline
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_option_in_a_command_block_is_the_plugins(doc: Path, pytestconfig: pytest.Config) -> None:
    unknown = set()
    for language, block in _FENCE.findall(doc.read_text()):
        if language == "python":
            continue
        for option in _OPTION.findall(block):
            try:
                pytestconfig.getoption(option[2:].replace("-", "_"))
            except ValueError:
                unknown.add(option)
    assert not unknown, f"{doc.relative_to(ROOT)}: options the plugin does not have: {sorted(unknown)}"


def test_the_option_check_can_fail(pytestconfig: pytest.Config) -> None:
    """The check above refuses an option the plugin does not declare (it is not vacuous)."""
    with pytest.raises(ValueError):
        pytestconfig.getoption("restore_no_such_option")
    assert _OPTION.findall("pytest --restore --restore-data=x --restore-rankers a,b") == [
        "--restore", "--restore-data", "--restore-rankers"
    ]
    assert slug("Batch: half the price, for a grid that can wait a day") == "batch-half-the-price-for-a-grid-that-can-wait-a-day"


def test_every_option_of_the_plugin_is_in_the_options_page(pytestconfig: pytest.Config) -> None:
    """docs/OPTIONS.md names every ``--restore-*`` option the plugin declares (one place for them all)."""
    page = (ROOT / "docs" / "OPTIONS.md").read_text()
    declared = {
        name
        for option in pytestconfig._parser._anonymous.options + [
            o for group in pytestconfig._parser._groups for o in group.options
        ]
        for name in option.names()
        if name.startswith("--restore")
    }
    assert declared and sorted(name for name in declared if f"`{name}" not in page) == []

