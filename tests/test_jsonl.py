"""JSON lines (issue 32): one reader and writer, split on ``\\n`` only, so text JSON allows survives.

U+2028, U+2029 and U+0085 are valid unescaped inside a JSON string, and
``str.splitlines()`` ends a line at each: a session's own records.jsonl
holding one was refused by its own ``report`` and ``compare``.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from grid_helpers import GRID, SMALLEST_GRID, TINY

from pytest_restore import jsonl
from pytest_restore.__main__ import main

#: Characters ``str.splitlines()`` ends a line at that JSON keeps unescaped in a string.
#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


SEPARATORS = "\u2028\u2029\x85"


def test_a_value_holding_every_line_separator_round_trips() -> None:
    values = [{"q": f"a{SEPARATORS}b", "n": 1}, ["x\ny\r\nz", "\x1c\x1d\x1e\x0b\x0c"], "plain"]
    text = jsonl.dumps(values)
    assert text.count("\n") == 3 and "\u2028" in text  # one line each, the separators kept as written
    assert [json.loads(line) for _, line in jsonl.numbered_lines(text)] == values
    assert len(text.splitlines()) > 3  # what the readers did before: a value cut in pieces


def test_blank_lines_are_skipped_and_lines_keep_their_numbers() -> None:
    assert list(jsonl.numbered_lines('{"a": 1}\n\n  \n[2]\r\n')) == [(1, '{"a": 1}'), (4, "[2]\r")]


def test_a_gzip_or_non_utf8_file_is_one_line_naming_it(tmp_path: Path) -> None:
    packed = tmp_path / "out.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"a": 1}\n'))
    with pytest.raises(jsonl.JsonlError) as info:
        jsonl.read_text(packed)
    assert str(info.value) == f"{packed}: a gzip file, not JSON lines (decompress it first: gunzip -k out.jsonl.gz)"
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"a": 1}\n{"b": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(jsonl.JsonlError) as info:
        jsonl.read_text(latin)
    assert str(info.value) == f"{latin}: line 2: not UTF-8 text: bad byte at offset 19"


def test_records_holding_u2028_rebuild_byte_identical_and_compare(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(TINY.read_text(encoding="utf-8"))
    data[0]["question"] = data[0]["question"].replace(" ", "\u2028", 1)
    data[0]["answer"] = data[0]["answer"].replace(" ", "\u2029", 1) + "\x85"
    (pytester.path / "tiny.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    pytester.makepyfile(test_grid=GRID)
    args = [a for a in SMALLEST_GRID if not a.startswith("--restore-data=")]
    result = pytester.runpytest_inprocess("-p", "no:xdist", *args, "--restore-data=tiny.json", "--restore-report-dir=run")
    assert result.ret == 0, result.outlines[-20:]
    session = pytester.path / "run"
    written = (session / "records.jsonl").read_text(encoding="utf-8")
    assert "\u2028" in written and "\u2029" in written  # as the questions hold them

    capsys.readouterr()
    assert main(["report", str(session / "records.jsonl"), "--out", str(pytester.path / "rebuilt")]) == 0
    for name in ("records.jsonl", "cells.csv", "hypotheses.json", "report.md", "summary.json"):
        assert (session / name).read_bytes() == (pytester.path / "rebuilt" / name).read_bytes(), name
    assert main(["compare", str(session), str(pytester.path / "rebuilt"), "--out", str(pytester.path / "cmp")]) == 0
    said = capsys.readouterr()
    assert "error" not in said.err, said.err
