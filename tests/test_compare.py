"""``python -m pytest_restore compare``: two runs cell by cell, and the gate on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import GRID

from pytest_restore.__main__ import main
from pytest_restore.compare import CompareError, compare_records, parse_threshold, worse_cells


def _record(qid: str, bin_: str | None, correct: bool, seed: int = 0) -> dict[str, Any]:
    return {
        "question_id": qid, "policy": "fifo", "budget": 80_000, "seed": seed, "regime": "b", "reader": "fake",
        "oracle_correct": True, "policy_correct": correct, "bin": bin_, "excluded": None,
    }


def test_paired_difference_on_shared_questions() -> None:
    old = [_record(f"q{i}", "irreversible" if i < 2 else None, i >= 2) for i in range(10)]
    # NEW: two more recoverable errors, and a question OLD does not have (left out of the pairing)
    new = [_record(f"q{i}", "irreversible" if i < 2 else "recoverable" if i < 4 else None, i >= 4) for i in range(10)]
    new.append(_record("extra", "recoverable", False))
    comparison = compare_records(old, new, resamples=2000)
    (cell,) = comparison.cells
    assert cell.shared_questions == 10
    rec = cell.figure("rec_rate")
    assert (rec.old, rec.new, rec.difference) == (0.0, 0.2, 0.2)
    assert rec.lo is not None and rec.hi is not None and 0.0 <= rec.lo < 0.2 < rec.hi
    assert cell.figure("two_bin_share").difference == pytest.approx(0.5 - 1.0)
    assert cell.figure("accuracy").worse_by == pytest.approx(0.2)
    assert worse_cells(comparison, [parse_threshold("rec_rate=0.1")])
    assert not worse_cells(comparison, [parse_threshold("rec_rate=0.25"), parse_threshold("irr_rate=0")])
    with pytest.raises(CompareError, match="FIGURE=THRESHOLD"):
        parse_threshold("recall=0.1")


@pytest.mark.slow
def test_a_ranker_change_moves_fifo_80k_and_the_gate_fails(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], embedded_data: Path
) -> None:
    """bm25-lite then recency on the same 20 questions of the embedded default: fifo 80k's recoverable errors move."""
    pytester.makepyfile(test_grid=GRID)
    common = ["-p", "no:xdist", f"--restore-data={embedded_data}", "--restore-questions", "20", "--restore-budgets", "80k", "--restore-policies",
              "fifo", "--restore-bootstrap", "500", "--restore-family-checks", "report"]
    for ranker in ("bm25-lite", "recency"):
        pytester.runpytest_inprocess(*common, "--restore-ranker", ranker, "--restore-report-dir", ranker)
    old, new, out = (str(pytester.path / x) for x in ("bm25-lite", "recency", "cmp"))
    capsys.readouterr()
    assert main(["compare", old, new, "--out", out, "--bootstrap", "2000"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((Path(out) / "compare.json").read_text())
    (cell,) = [c for c in result["cells"] if (c["policy"], c["budget"], c["regime"]) == ("fifo", 80_000, "b")]
    assert 0 < cell["shared_questions"] <= 20  # the oracle-answerable of the 20, in both runs
    assert f"| fifo 80k (b) | {cell['shared_questions']} |" in printed
    rec = cell["figures"]["rec_rate"]
    assert rec["difference"] > 0 and rec["ci_lo"] > 0  # moved, and the interval says so
    assert (Path(out) / "compare.md").read_text() in printed
    assert main(["compare", old, new, "--out", out, "--fail-if-worse", "rec_rate=0.05"]) == 1
    assert "worse: fifo 80k (b): rec_rate" in capsys.readouterr().out
    assert main(["compare", old, new, "--out", out, "--fail-if-worse", "rec_rate=0.9"]) == 0
