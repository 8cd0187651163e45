"""Rankers compared in one run (``--restore-rankers``): the grid dimension, the rankers family, the report.

One child pytest runs the tiny fixture under three rankers; the statistics
are checked in process against a hand-made pair of rankers.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import GRID, TINY, ChildRun, flat_record

from pytest_restore.__main__ import main
from pytest_restore.libraries.registry import LIBRARIES
from pytest_restore.record import CellKey, Record, baseline_ranker
from pytest_restore.records_file import read_records
from pytest_restore.run.grid import ranker_labels
from pytest_restore.stats.analysis import analyse
from pytest_restore.stats.rankers import orderings, ranker_rows

#: No test here reads a report's figure (the report CLI's rebuild is read for report.md): the reports written in this
#: process build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture(scope="module")
def grid_run(rankers_grid: ChildRun) -> ChildRun:
    return rankers_grid


def test_the_ranker_is_a_grid_dimension_and_every_record_names_its_ranker(grid_run: ChildRun) -> None:
    assert grid_run.ret == 0, grid_run.output[-3000:]
    for item in ("fifo-600-bm25-lite", "fifo-600-dense", "fifo-300-hybrid", "random-300-dense"):
        assert f"test_cell[{item}] PASSED" in grid_run.output
    records = read_records(grid_run.report / "records.jsonl")
    by_ranker: dict[str, set[tuple[Any, ...]]] = {}
    for r in records:
        by_ranker.setdefault(r.ranker, set()).add((r.question_id, r.policy, r.budget, r.seed, r.regime))
    assert sorted(by_ranker) == ["bm25-lite", "dense:fake", "hybrid:fake"]
    # the terminal's table is one ranker's: its title says which
    assert "restore-counterfactual audit (regime b, ranker bm25-lite; every ranker in report.md)" in grid_run.output
    assert by_ranker["bm25-lite"] == by_ranker["dense:fake"] == by_ranker["hybrid:fake"]  # the same questions and cells
    # the stores are the cell's, whatever reads them
    stores = {(r.question_id, r.policy, r.budget, r.seed, r.ranker): r.store_units for r in records}
    assert all(stores[(q, p, b, s, "bm25-lite")] == n for (q, p, b, s, _), n in stores.items())


def test_the_report_answers_first_how_the_recoverable_share_moves_between_rankers(grid_run: ChildRun) -> None:
    report = (grid_run.report / "report.md").read_text()
    findings = report.split("## Findings", 1)[1].strip().splitlines()
    assert findings[0].startswith("- **Rankers.** At 600, the recoverable share of the errors")
    assert "bm25-lite" in findings[0] and "dense:fake" in findings[0] and "(95% CI" not in findings[0].split(":")[0]
    assert "## Rankers compared (regime b)" in report and "Policies by recoverable share" in report
    hypotheses = json.loads((grid_run.report / "hypotheses.json").read_text())
    tests = hypotheses["families"]["rankers"]
    # fifo and random at two budgets, two compared rankers, two figures (no-evict too: it is a cell of the grid)
    assert len(tests) == 3 * 2 * 2 * 2
    assert {t["other"] for t in tests} == {"dense:fake", "hybrid:fake"}
    assert all(t["p_holm"] is None or t["p_holm"] >= t["p_raw"] for t in tests)


def test_cells_csv_holds_every_rankers_cells_with_a_ranker_column(grid_run: ChildRun) -> None:
    with (grid_run.report / "cells.csv").open() as f:
        rows = list(csv.DictReader(f))
    by_ranker: dict[str, set[tuple[str, str, str]]] = {}
    for row in rows:
        by_ranker.setdefault(row["ranker"], set()).add((row["policy"], row["budget"], row["regime"]))
    assert sorted(by_ranker) == ["bm25-lite", "dense:fake", "hybrid:fake"]
    assert by_ranker["bm25-lite"] == by_ranker["dense:fake"] == by_ranker["hybrid:fake"]
    assert len(by_ranker["bm25-lite"]) == 3 * 2 * 2  # no-evict, fifo, random x 600, 300 x both regimes


def test_the_report_cli_renders_a_comparison_run_again(grid_run: ChildRun, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert main(["report", str(grid_run.report / "records.jsonl"), "--out", str(out)]) == 0
    assert "## Rankers compared (regime b)" in (out / "report.md").read_text()


def _records(ranker: str, recovers: set[str]) -> list[Record]:
    """Regime-(b) fifo records of ten questions: every one an error, recoverable where ``recovers`` says."""
    out = []
    for i in range(10):
        qid = f"q{i}"
        recoverable = qid in recovers
        out.append(flat_record(
            question_id=qid, question_type="single-session-user", policy="fifo", budget=80_000,
            seed=0, regime="b", reader="fake", oracle_correct=True, policy_correct=False,
            restored_correct=True, negative_restore_gain=False, gold_units=1,
            gold_evicted=0 if recoverable else 1, bin="recoverable" if recoverable else "irreversible",
            excluded=None, ranker=ranker,
        ))
    return out


def test_the_rankers_family_is_the_paired_difference_from_the_baseline_ranker() -> None:
    lexical = _records("bm25-lite", {"q0", "q1"})
    dense = _records("dense:x", {"q0", "q1", "q2", "q3", "q4", "q5"})
    assert baseline_ranker(lexical + dense) == "bm25-lite" and baseline_ranker(dense) is None
    both = analyse(lexical + dense, resamples=400, seed=1)
    alone = analyse(lexical, resamples=400, seed=1)
    assert both.cells == alone.cells  # every table but the comparison is the baseline's
    [compared] = both.ranker_cells
    assert compared.key == CellKey("fifo", 80_000, "b", "fake", "dense:x") and compared.rec == 6
    tests = {t.note: t for t in both.family("rankers")}
    assert tests["recoverable share"].statistic == pytest.approx(0.6 - 0.2)
    assert tests["two-bin share"].statistic == pytest.approx(0.4 - 0.8)
    # paired: the same questions in each resample, so the interval is that of the per-question difference
    assert tests["recoverable share"].ci_lo is not None and tests["recoverable share"].ci_lo > 0
    assert all(t.p_holm is not None for t in tests.values())
    rows = ranker_rows(both)
    assert [(r.ranker, r.recoverable.share if r.recoverable else None) for r in rows] == [("bm25-lite", 0.2), ("dense:x", 0.6)]
    assert [o.changes for o in orderings(both)] == [False]
    assert not analyse(lexical, resamples=400, seed=1).family("rankers")


def test_item_ids_name_a_ranker_by_its_family_unless_two_share_it() -> None:
    assert ranker_labels(["bm25-lite", "dense:fake", "hybrid:fake"]) == {
        "bm25-lite": "bm25-lite", "dense:fake": "dense", "hybrid:fake": "hybrid",
    }
    labels = ranker_labels(["dense:fake", "dense:openai:text-embedding-3-small"])
    assert labels == {"dense:fake": "dense:fake", "dense:openai:text-embedding-3-small": "dense:openai:text-embedding-3-small"}
    assert np.unique(list(labels.values())).size == 2


def test_an_unknown_ranker_in_the_list_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest_inprocess(f"--restore-data={TINY}", "--restore-rankers=bm25-lite,bm99", "-p", "no:xdist")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    # the built-in rankers, then the memory libraries' (registered by name, imported only when asked for)
    names = ", ".join(["bm25-lite", "recency", *(library.name for library in LIBRARIES if library.ranker)])
    assert errors == [
        f"ERROR: --restore-rankers: unknown ranker 'bm99'; registered: {names}, or dense:EMBEDDER, hybrid:EMBEDDER"
    ], result.errlines
