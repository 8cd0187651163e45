"""report.html: self-contained, and in a real browser its filters and stories show what records.jsonl holds.

The browser test starts headless Chromium (Debian's ``chromium``; ``.ci/run``
installs it) on the tiny grid's report.html, with the page's state in its
address (filters and the opened record, the same code path the page's
controls take), and reads the page back with ``--dump-dom``. It is skipped,
with its reason, where Chromium is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.report.html import unpack

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


# -- a small DOM, enough to read the dumped page ------------------------------------------------

_VOID = {"br", "input", "meta", "img", "hr", "link", "wbr", "col", "source"}


class Node:
    """An element: its tag, attributes, children and text."""

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag, self.attrs, self.children = tag, attrs, []  # type: list[Any]

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def all(self, match: Any) -> list[Node]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                if match(c):
                    out.append(c)
                out += c.all(match)
        return out

    def by_id(self, name: str) -> Node:
        found = self.all(lambda n: n.attrs.get("id") == name)
        assert found, f"no element #{name}"
        return found[0]

    def classed(self, name: str) -> list[Node]:
        return self.all(lambda n: name in n.attrs.get("class", "").split())


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    builder = _Builder()
    builder.feed(page)
    return builder.root


def open_page(path: Path, state: str, profile: Path) -> Node:
    """The page as Chromium has it once its script ran, opened at ``#state``."""
    assert CHROMIUM is not None
    args = [CHROMIUM, "--headless", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
            "--virtual-time-budget=20000", "--dump-dom", f"{path.as_uri()}#{state}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.insert(2, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = parse(done.stdout)
    body = dom.all(lambda n: n.tag == "body")[0]
    assert body.attrs.get("data-ready") == "1", "the page's script did not finish"
    return dom


# -- the page without a browser ----------------------------------------------------------------


def test_the_page_is_self_contained(tiny_report: Path) -> None:
    """No address outside the page: no script, style, font or image is fetched, the figure is inline SVG."""
    page = (tiny_report / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!["'#])""", page)
    assert "@import" not in page and not re.search(r"url\((?!#)", page)
    assert "http" not in re.sub(r'xmlns(?::\w+)?="http://www\.w3\.org/[^"]*"', "", page)
    assert '<figure id="figure"><svg' in page
    packed = re.search(r'<script type="application/octet-stream" id="data">([^<]*)</script>', page)
    assert packed is not None
    data = unpack(packed.group(1))
    assert data["texts"] == ""  # the session gave the page its data file: every text is there
    assert len(data["records"]) == len((tiny_report / "records.jsonl").read_text().splitlines())


# -- in a real browser --------------------------------------------------------------------------

browser = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")


def _expected_rows(records: list[dict[str, Any]], **want: Any) -> list[int]:
    return [i for i, r in enumerate(records) if all(r[k] == v for k, v in want.items())]


def _verdict(value: bool | None) -> str:
    return {True: "correct", False: "wrong", None: "no verdict"}[value]


def check_story(dom: Node, record: dict[str, Any]) -> None:
    """The opened story says what the record holds: cell, bin, question, gold and its fate, contexts, answers."""
    title = dom.by_id("story-title").text
    assert record["question_id"] in title and f"{record['policy']} " in title and f"regime {record['regime']}" in title
    assert dom.by_id("story-outcome").text == (record["bin"] or dom.by_id("story-outcome").text)
    assert dom.by_id("story-question").text == record["question"]
    assert dom.by_id("story-reference").text == record["reference"]
    gold = dom.by_id("story-gold").classed("unit")
    assert [int(g.attrs["data-pos"]) for g in gold] == record["gold_positions"]
    evicted = set(record["gold_evicted_units"] or ())
    assert [g.attrs["data-evicted"] for g in gold] == [str(p in evicted).lower() for p in record["gold_positions"]]
    conditions = dom.classed("condition")
    assert len(conditions) == 3
    for node, name in zip(conditions, ("oracle", "policy", "restored")):
        condition = record["conditions"][name]
        answer = node.classed("answer")[0].text
        assert answer == (condition["answer"] if condition["answer"] is not None else "-")
        assert f"answer ({_verdict(condition['correct'])})" in node.text
        seen = node.classed("seen")
        assert [int(s.attrs["data-pos"]) for s in seen] == condition["injected_positions"]
        for s in seen:
            pos = int(s.attrs["data-pos"])
            marks = [m.text for m in s.classed("mark")]
            assert ("gold" in marks) == (pos in record["gold_positions"])
            forced = name != "policy" or record["regime"] == "a"
            assert ("forced" in marks) == (forced and pos in record["gold_positions"] and (name != "policy" or pos not in evicted))


@browser
def test_filters_and_stories_in_chromium(tiny_report: Path, tiny_records: list[dict[str, Any]], tmp_path: Path) -> None:
    page = tiny_report / "report.html"
    # the filters: one cell's regime-(b) records, in records.jsonl's order
    dom = open_page(page, "policy=fifo&budget=300&regime=b&open=first", tmp_path / "profile")
    want = _expected_rows(tiny_records, policy="fifo", budget=300, regime="b")
    rows = dom.by_id("rows").all(lambda n: n.tag == "tr" and "data-index" in n.attrs)
    assert [int(r.attrs["data-index"]) for r in rows] == want
    assert dom.by_id("count").text.startswith(f"{len(want)} of {len(tiny_records)} records match")
    check_story(dom, tiny_records[want[0]])
    # a question of each bin the run holds, opened from the bin filter
    bins = [b for b in ("irreversible", "recoverable", "residual") if any(r["bin"] == b for r in tiny_records)]
    assert bins
    for name in bins:
        dom = open_page(page, f"bin={name}&open=first", tmp_path / "profile")
        want = _expected_rows(tiny_records, bin=name)
        assert dom.by_id("count").text.startswith(f"{len(want)} of {len(tiny_records)} records match")
        check_story(dom, tiny_records[want[0]])
