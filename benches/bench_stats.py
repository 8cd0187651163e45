"""Benchmark of the statistics pass (run as a script: ``python benches/bench_stats.py``).

Builds per-question records for the paper's full default grid (470 questions;
no-evict, fifo, random x 3 seeds, redundancy, llm-importance, control; budgets
80k/30k/8k; regimes a and b; one reader) with plausible random outcomes, then
times

1. the whole statistics pass, ``stats.analyse`` with 10,000 resamples;
2. one statistic (the fifo 80k two-bin share interval) with the project's
   resample-matrix bootstrap and with ``scipy.stats.bootstrap``;
3. the per-cell intervals of every cell (two-bin share, irr/N, accuracy), the
   way the pass computes them (one resample matrix, one product) against one
   ``scipy.stats.bootstrap`` call per statistic.

It prints figures only; there are no timing asserts. Targets: the pass under
5 s on 2 cores, and at least 20x faster than scipy for the same statistics.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np
from bench_grid import best_of  # benches/ is on sys.path when run as a script
from numpy.typing import NDArray
from scipy import stats as scipy_stats  # type: ignore[import-untyped]

from pytest_restore.bootstrap import Resampler
from pytest_restore.data.dataset import QUESTION_TYPES
from pytest_restore.record import Condition, Conditions, Record
from pytest_restore.stats.analysis import analyse

BUDGETS = (80_000, 30_000, 8_000)
# Probability that eviction removes at least one gold unit, per budget. The
# control evicts gold at several times the baseline rate at the loose budget.
GOLD_EVICTION = {
    "no-evict": (0.0, 0.0, 0.0),
    "fifo": (0.25, 0.55, 0.80),
    "random": (0.25, 0.55, 0.80),
    "redundancy": (0.24, 0.54, 0.80),
    "llm-importance": (0.18, 0.50, 0.78),
    "control": (0.80, 0.95, 0.99),
}
SEEDS = {"random": (0, 1, 2)}
READER = "fake-reader"


def make_records(questions: int = 470, seed: int = 0) -> list[Record]:
    """Per-question records for the full grid with plausible outcomes.

    Regime (a) forces surviving gold, so when no gold was evicted its policy
    answer equals the restored answer and it has no recoverable error, as the
    construct demands; no-evict never evicts gold.
    """
    rng = np.random.default_rng(seed)
    records: list[Record] = []
    for q in range(questions):
        qid = f"q{q:04d}"
        qtype = QUESTION_TYPES[q % len(QUESTION_TYPES)]
        oracle = bool(rng.random() < 0.72)
        skill = float(rng.uniform(0.6, 0.95))  # question-level difficulty shared by all cells
        for policy, evict_rates in GOLD_EVICTION.items():
            for budget, evict_rate in zip(BUDGETS, evict_rates):
                for s in SEEDS.get(policy, (0,)):
                    evicted = bool(rng.random() < evict_rate)
                    restored = bool(rng.random() < skill)
                    for regime in ("a", "b"):
                        if evicted:
                            correct = bool(rng.random() < 0.2)
                        elif regime == "a":
                            correct = restored
                        else:
                            # Gold survived: only a retrieval miss separates it from the restore.
                            correct = restored and bool(rng.random() > 0.12)
                        binned = oracle and not correct
                        if not binned:
                            bin_ = None
                        elif not restored:
                            bin_ = "residual"
                        else:
                            bin_ = "irreversible" if evicted else "recoverable"
                        records.append(
                            Record(
                                question_id=qid,
                                question_type=qtype,
                                policy=policy,
                                budget=budget,
                                seed=s,
                                regime=regime,
                                reader=READER,
                                conditions=Conditions(Condition(oracle), Condition(correct), Condition(restored)),
                                negative_restore_gain=False,
                                gold_units=1,
                                gold_evicted=int(evicted),
                                bin=bin_,
                                excluded=None,
                            )
                        )
    return records


def cell_vectors(
    records: list[Record], policy: str, budget: int, regime: str
) -> dict[str, NDArray[np.float64]]:
    """Per-question N, irr, rec, correct vectors of one cell, over the sorted question ids."""
    ids = sorted({r.question_id for r in records})
    col = {q: i for i, q in enumerate(ids)}
    out = {k: np.zeros(len(ids)) for k in ("n", "irr", "rec", "correct")}
    for r in records:
        if (r.policy, r.budget, r.regime) != (policy, budget, regime):
            continue
        if r.excluded is None and r.conditions.oracle.correct:
            i = col[r.question_id]
            out["n"][i] += 1
            out["correct"][i] += r.conditions.policy.correct is True
            out["irr"][i] += r.bin == "irreversible"
            out["rec"][i] += r.bin == "recoverable"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    resamples, repeats = args.resamples, args.repeats

    start = time.perf_counter()
    records = make_records()
    print(f"records: {len(records)} built in {time.perf_counter() - start:.2f} s")

    # 1. The whole pass.
    analysis = analyse(records, resamples=resamples)
    pass_time = best_of(lambda: analyse(records, resamples=resamples), repeats)
    print(
        f"analyse(): {pass_time:.2f} s for {len(analysis.cells)} cells and "
        f"{len(analysis.tests)} tests, R={resamples} (target < 5 s on 2 cores; "
        f"{os.cpu_count()} CPUs here)"
    )
    for row in analysis.summary():
        print(f"  {row}")

    # 2. One statistic: the fifo 80k regime-b two-bin share interval.
    v = cell_vectors(records, "fifo", 80_000, "b")
    ids = [f"q{q:04d}" for q in range(len(v["n"]))]

    def ours() -> tuple[float, float]:
        w = Resampler.draw(ids, resamples, 1)
        sums = w.totals(np.stack([v["irr"], v["rec"]], axis=1))
        share = sums[:, 0] / (sums[:, 0] + sums[:, 1])
        lo, hi = np.quantile(share[~np.isnan(share)], [0.025, 0.975])
        return float(lo), float(hi)

    def two_bin(irr: NDArray[np.float64], rec: NDArray[np.float64], axis: int) -> Any:
        return irr.sum(axis=axis) / (irr.sum(axis=axis) + rec.sum(axis=axis))

    def theirs() -> Any:
        return scipy_stats.bootstrap(
            (v["irr"], v["rec"]),
            two_bin,
            paired=True,
            vectorized=True,
            n_resamples=resamples,
            method="percentile",
            rng=np.random.default_rng(1),
        ).confidence_interval

    drawn = Resampler.draw(ids, resamples, 1)

    def ours_marginal() -> None:
        # One more statistic once the pass has drawn W: a product and a quantile.
        sums = drawn.totals(np.stack([v["irr"], v["rec"]], axis=1))
        share = sums[:, 0] / (sums[:, 0] + sums[:, 1])
        np.quantile(share[~np.isnan(share)], [0.025, 0.975])

    t_ours, t_theirs = best_of(ours, repeats), best_of(theirs, repeats)
    t_marginal = best_of(ours_marginal, repeats)
    print(
        f"one statistic (fifo 80k two-bin share), same resamples, same interval "
        f"{tuple(round(x, 4) for x in ours())} vs {tuple(round(float(x), 4) for x in theirs())}:\n"
        f"  cold (drawing W included): ours {t_ours * 1e3:.1f} ms, scipy {t_theirs * 1e3:.1f} ms: "
        f"{t_theirs / t_ours:.1f}x\n"
        f"  marginal (W shared by the pass): ours {t_marginal * 1e3:.2f} ms: "
        f"{t_theirs / t_marginal:.1f}x"
    )

    # 3. Every cell's three intervals: one matrix product against one scipy call each.
    cells = [(c.policy, c.budget, c.regime) for c in analysis.cells]
    vectors = [cell_vectors(records, *cell) for cell in cells]

    def ours_all() -> None:
        w = Resampler.draw(ids, resamples, 1)
        stacked = np.stack([x[k] for x in vectors for k in ("n", "irr", "rec", "correct")], axis=1)
        sums = w.totals(stacked)
        for i in range(len(vectors)):
            n, irr, rec, correct = (sums[:, 4 * i + j] for j in range(4))
            for num, den in ((irr, irr + rec), (irr, n), (correct, n)):
                ratio = np.divide(num, den, out=np.full(num.shape, np.nan), where=den != 0)
                defined = ratio[~np.isnan(ratio)]
                if defined.size:
                    np.quantile(defined, [0.025, 0.975])

    def ratio_of_sums(num: NDArray[np.float64], den: NDArray[np.float64], axis: int) -> Any:
        return num.sum(axis=axis) / den.sum(axis=axis)

    def theirs_all() -> None:
        rng = np.random.default_rng(1)
        for x in vectors:
            for num, den in (
                (x["irr"], x["irr"] + x["rec"]),
                (x["irr"], x["n"]),
                (x["correct"], x["n"]),
            ):
                if den.sum() == 0:
                    continue
                with np.errstate(invalid="ignore", divide="ignore"):
                    scipy_stats.bootstrap(
                        (num, den),
                        ratio_of_sums,
                        paired=True,
                        vectorized=True,
                        n_resamples=resamples,
                        method="percentile",
                        rng=rng,
                    )

    t_ours_all = best_of(ours_all, repeats)
    t_theirs_all = best_of(theirs_all, 1)
    print(
        f"all {len(vectors)} cells x 3 intervals: ours {t_ours_all:.3f} s, "
        f"scipy {t_theirs_all:.2f} s: {t_theirs_all / t_ours_all:.1f}x (target >= 20x)"
    )


if __name__ == "__main__":
    main()
