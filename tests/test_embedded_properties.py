"""What the main job's report must show on the embedded default with the fake models.

The figures come from one real run of ``pytest benches/`` on the embedded
synthetic LongMemEval-S (the ``embedded_report`` session fixture). They are
properties of the generator (``synthetic.py``) and the fake models
(``fake.py``) together with the protocol's policies and ranker: a change to
any of them that breaks one of these makes the default audit unrealistic.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from pytest_restore.synthetic.generator import generate, history_tokens

BASELINES = ("fifo", "random", "redundancy")
EVICTING = ("fifo", "random", "redundancy", "llm-importance", "control")
H1_POLICIES = ("fifo", "random", "redundancy", "control")
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
                assert _int(cells, policy, budget, regime, "N") >= 80


def test_construct_checks(cells: Cells) -> None:
    """Regime (a) has no recoverable errors; no-evict has no irreversible ones."""
    for (policy, budget, regime), row in cells.items():
        if regime == "a":
            assert int(row["rec"]) == 0, (policy, budget)
        if policy == "no-evict":
            assert int(row["irr"]) == 0, (budget, regime)
            assert float(row["gold_evicted_rate"]) == 0.0


@pytest.mark.parametrize("policy", BASELINES)
def test_80k_top_k_mixes_both_bins(cells: Cells, policy: str) -> None:
    """At 80k in regime (b), destruction is the majority but retrieval misses are real."""
    assert _int(cells, policy, 80_000, "b", "rec") > 0
    share = _float(cells, policy, 80_000, "b", "two_bin_share")
    assert 0.5 < share < 0.95


@pytest.mark.parametrize("policy", EVICTING)
def test_8k_is_destruction(cells: Cells, policy: str) -> None:
    for regime in ("a", "b"):
        assert _float(cells, policy, 8_000, regime, "two_bin_share") >= 0.95


@pytest.mark.parametrize("policy", EVICTING)
def test_residual_bin_is_never_empty(cells: Cells, policy: str) -> None:
    for budget in BUDGETS:
        for regime in ("a", "b"):
            assert _int(cells, policy, budget, regime, "res") > 0, (budget, regime)


def test_control_evicts_gold_at_twice_the_baseline_rate(cells: Cells) -> None:
    control = _float(cells, "control", 80_000, "b", "gold_evicted_rate")
    baseline = sum(_float(cells, p, 80_000, "b", "gold_evicted_rate") for p in BASELINES) / len(BASELINES)
    assert baseline > 0
    assert control >= 2 * baseline


def test_redundancy_evicts_gold(cells: Cells) -> None:
    """Redundancy is no longer blind to the evidence: some gold goes at 80k, nearly all at 8k."""
    assert 0.1 < _float(cells, "redundancy", 80_000, "b", "gold_evicted_rate") < 0.7
    assert _float(cells, "redundancy", 8_000, "b", "gold_evicted_rate") > 0.8


def test_h1_rejects_in_every_evicting_cell(cells: Cells, embedded_report: Path) -> None:
    for policy in H1_POLICIES:
        for budget in BUDGETS:
            assert _int(cells, policy, budget, "a", "irr") > 0, (policy, budget)
    families = json.loads((embedded_report / "hypotheses.json").read_text(encoding="utf-8"))["families"]
    decisions = {(t["policy"], t["budget"]): t["decision"] for t in families["H1"]}
    assert decisions == {(p, b): "reject" for p in H1_POLICIES for b in BUDGETS}


def test_full_synthetic_file_history_size() -> None:
    """The 500-question synthetic file has LongMemEval-S-sized histories."""
    records = generate(500, 0)
    sizes = [history_tokens(r) for r in records]
    assert 95_000 <= sum(sizes) / len(sizes) <= 110_000
