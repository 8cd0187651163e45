"""The robustness reader: the grid again under a second reader, and the paper's comparison."""

from __future__ import annotations

import csv

import pytest
from grid_helpers import GRID, flat_record, small_args

from pytest_restore.record import Record
from pytest_restore.records_file import read_records
from pytest_restore.report.markdown import render_comparison_md
from pytest_restore.stats.analysis import analyse
from pytest_restore.stats.findings import compare_readers

#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def test_second_reader_runs_the_grid_again_and_is_compared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest(
        "-p", "no:xdist", *small_args(), "--restore-policies", "fifo,random", "--restore-robustness-reader", "fake-strong"
    )
    result.assert_outcomes(passed=2 * 2 * 3)  # readers x policies x budgets
    ids = pytester.runpytest("-p", "no:xdist", *small_args(), "--collect-only", "-q",
                             "--restore-policies", "fifo", "--restore-robustness-reader", "fake-strong").outlines
    assert "test_grid.py::test_cell[fifo-600-fake-strong]" in ids and "test_grid.py::test_cell[fifo-600]" in ids
    out = pytester.path / "restore-report"
    with open(out / "cells.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["reader"] for r in rows} == {"fake", "fake-strong"}
    records = read_records(out / "records.jsonl")
    by_reader = {reader: [r for r in records if r.reader == reader] for reader in ("fake", "fake-strong")}
    assert len(by_reader["fake"]) == len(by_reader["fake-strong"]) > 0
    report = (out / "report.md").read_text()
    assert "## Robustness reader" in report and "fake-strong vs fake" in report


def test_same_reader_twice_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", *small_args(), "--restore-robustness-reader", "fake")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--restore-robustness-reader: must differ from --restore-reader*"])


def _records(reader: str, *, shares: dict[int, tuple[int, int]], residual: int) -> list[Record]:
    """Regime (a) and (b) records of fifo/random/redundancy/control at two budgets for one reader."""
    records: list[Record] = []
    for policy, bump in (("fifo", 0), ("random", 1), ("redundancy", 2), ("control", 3)):
        for budget, (irr, rec) in shares.items():
            for q in range(40):
                qid = f"q{q:02d}"
                if q < irr + bump:
                    bin_b, evicted = "irreversible", 1
                elif q < irr + bump + rec and policy != "control":
                    bin_b, evicted = "recoverable", 0
                elif q >= 40 - residual:
                    bin_b, evicted = "residual", 0
                else:
                    bin_b, evicted = None, 0
                for regime in ("a", "b"):
                    b = bin_b if regime == "b" or bin_b != "recoverable" else None
                    records.append(
                        flat_record(
                            question_id=qid,
                            question_type="multi-session",
                            policy=policy,
                            budget=budget,
                            seed=0,
                            regime=regime,
                            reader=reader,
                            oracle_correct=True,
                            policy_correct=b is None,
                            restored_correct=b in ("irreversible", "recoverable"),
                            negative_restore_gain=False,
                            gold_units=1,
                            gold_evicted=evicted,
                            bin=b,
                            excluded=None,
                        )
                    )
    return records


def test_comparison_counts_rejections_orders_policies_and_sums_the_residual() -> None:
    shares = {80_000: (12, 6), 8_000: (28, 0)}  # irreversible questions stay clear of the residual ones
    records = _records("weak", shares=shares, residual=8) + _records("strong", shares=shares, residual=3)
    comparison = compare_readers(analyse(records, resamples=2000))
    assert comparison is not None
    per = comparison["per_reader"]
    assert per["weak"]["families"]["H1"] == per["strong"]["families"]["H1"]
    assert per["weak"]["families"]["H1"]["tests"] == 8
    # the residual bin is the reader-dependent part
    assert sum(per["weak"]["residual"].values()) == 4 * 2 * 8
    assert sum(per["strong"]["residual"].values()) == 4 * 2 * 3
    # control destroys everything it touches: the highest two-bin share at 80k
    assert per["weak"]["two_bin_ordering"]["80000"][0] == "control"
    assert comparison["same_ordering_as"]["strong"]["weak"] == {"80000": True, "8000": True}
    text = render_comparison_md(comparison)
    assert "| weak |" in text and "| strong |" in text


def test_one_reader_has_no_comparison() -> None:
    records = _records("only", shares={80_000: (12, 6)}, residual=2)
    assert compare_readers(analyse(records, resamples=500)) is None
