"""What the main job's report must show on the embedded default with the fake models.

The figures come from one real run of ``pytest benches/ --restore-ablations``
on the embedded synthetic LongMemEval-S (the ``embedded_report`` session
fixture). These are checks that the pipeline can register what a real reader
would do (construct checks, a complete grid, errors that depend on the
context), not targets for the audit's outcomes: how the simulation compares
with the paper is printed by ``benches/bench_world.py``, never asserted.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_restore.record import ABLATIONS, Record
from pytest_restore.synthetic.embedded import EMBEDDED_QUESTIONS
from pytest_restore.synthetic.generator import history_tokens

EVICTING = ("fifo", "random", "redundancy", "llm-importance", "control")
BUDGETS = (80_000, 30_000, 8_000)

Cells = dict[tuple[str, int, str], dict[str, str]]


@pytest.fixture(scope="module")
def cells(embedded_report: Path) -> Cells:
    with open(embedded_report / "cells.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["reader"] for r in rows} == {"fake"}
    return {(r["policy"], int(r["budget"]), r["regime"]): r for r in rows}


def _int(cells: Cells, policy: str, budget: int, regime: str, column: str) -> int:
    return int(cells[(policy, budget, regime)][column])


def _float(cells: Cells, policy: str, budget: int, regime: str, column: str) -> float:
    value = cells[(policy, budget, regime)][column]
    assert value != "", f"{policy} {budget} {regime}: {column} is empty"
    return float(value)


def test_grid_is_complete(cells: Cells) -> None:
    for policy in ("no-evict", *EVICTING):
        for budget in BUDGETS:
            for regime in ("a", "b"):
                assert (policy, budget, regime) in cells
                assert _int(cells, policy, budget, regime, "N") >= 40


def test_construct_checks(cells: Cells) -> None:
    """Regime (a) has no recoverable errors; no-evict has no irreversible ones."""
    for (policy, budget, regime), row in cells.items():
        if regime == "a":
            assert int(row["rec"]) == 0, (policy, budget)
        if policy == "no-evict":
            assert int(row["irr"]) == 0, (budget, regime)
            assert float(row["gold_evicted_rate"]) == 0.0


@pytest.fixture(scope="module")
def records(embedded_records: tuple[Record, ...]) -> list[Record]:
    return list(embedded_records)


def test_the_simulation_can_surprise_the_audit(records: list[Record]) -> None:
    """What the fake reader's model makes possible, seen in one run with the ablations.

    A reader that answered exactly when all gold is present could show none
    of these: a restore that turns a right answer wrong, an ablation that
    flips a case, residual errors that differ from cell to cell, an oracle
    context that fails.
    """
    assert sum(r.negative_restore_gain for r in records) > 0
    ran = [r.ablations for r in records if r.ablations is not None]
    flips = {key: sum(a.verdict(key) is True for a in ran) for key, _title in ABLATIONS}
    assert ran  # the ablations ran
    assert max(flips.values()) > 0, flips
    residual: dict[tuple[str, int, str], set[str]] = {}
    for r in records:
        if r.bin == "residual":
            residual.setdefault((r.policy, r.budget, r.regime), set()).add(r.question_id)
    assert len({frozenset(q) for q in residual.values()}) > 1
    oracle = {r.question_id: r.conditions.oracle.correct for r in records if r.excluded is None}
    assert 0 < sum(oracle.values()) < len(oracle)


def test_residual_at_session_granularity(embedded_data: Path) -> None:
    """With whole sessions as units the reader still misuses evidence it has."""
    from pytest_restore.audit.run import Audit, AuditConfig
    from pytest_restore.data.dataset import load_dataset
    from pytest_restore.data.units import Granularity
    from pytest_restore.memory.eviction import Fifo, NoEvict
    from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer

    dataset = load_dataset(embedded_data)
    reader = FakeReader()
    config = AuditConfig(granularity=Granularity.SESSION, budgets=(80_000,), seeds=(0,))
    audit = Audit(dataset, config, reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    binned = [r.bin for policy in (NoEvict(), Fifo()) for r in audit.run_cell(policy, 80_000).records]
    assert binned.count("residual") > 0


def test_main_job_passes_with_the_fake_models(embedded_report: Path) -> None:
    """The README's main job passes: expectations the run cannot test at its N are listed, not failed."""
    assert (embedded_report / "pytest-exit-code.txt").read_text() == "0"


def test_report_says_the_figures_are_simulated(embedded_report: Path) -> None:
    report = (embedded_report / "report.md").read_text(encoding="utf-8").splitlines()
    assert report[0].startswith("# ") and report[1] == ""
    assert "simulated reader" in report[2] and "not a finding about any model" in report[2]
    assert "## The simulated reader" in report
    summary = json.loads((embedded_report / "summary.json").read_text(encoding="utf-8"))
    assert summary["simulated"] is True and summary["simulated_note"] == report[2]


def test_full_synthetic_file_history_size(embedded_data: Path) -> None:
    """The synthetic file has LongMemEval-S-sized histories: the embedded default's hundred, as generated afresh
    (each history is generated to the same size whatever the number of questions)."""
    records = json.loads(embedded_data.read_text(encoding="utf-8"))
    assert len(records) == EMBEDDED_QUESTIONS
    sizes = [history_tokens(r) for r in records]
    assert 95_000 <= sum(sizes) / len(sizes) <= 110_000
