"""The simulated world against the paper: calibration on the baseline, the rest out of sample.

    python benches/bench_world.py [--data FILE] [--calibrate]

On the 500-question synthetic file (generated into ``--work-dir`` unless
``--data`` names one) with the fake reader, judge and scorer:

1. **Calibration** (the only figures the reader's knobs were chosen on): the
   oracle-answerable count and the no-evict cell under top-k (accuracy,
   recoverable, residual), ours beside the paper's, with a binomial sampling
   error. ``--calibrate`` searches the knobs on these figures alone and prints
   the best few; the chosen values are the defaults of
   :class:`pytest_restore.models.fake.ReaderKnobs`.
2. **Out of sample**: every regime-(b) 80k cell, ours (with question-cluster
   bootstrap intervals) beside the paper's, and whether the paper's figure
   falls in our interval. This table is a result, not a target: nothing was
   tuned on it.

The paper's reference figures live in :data:`PAPER_CELLS` and
:data:`PAPER_ORACLE`, nowhere else.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import load_dataset
from pytest_restore.memory.eviction import default_registry
from pytest_restore.memory.retrieval import inject
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer, ReaderKnobs, normalise
from pytest_restore.stats.analysis import analyse
from pytest_restore.synthetic.generator import generate, write_dataset

#: The paper's oracle filter: oracle-answerable questions of the evidence-labelled ones.
PAPER_ORACLE = (336, 470)
#: The paper's per-cell counts, regime (b), primary reader: policy -> budget -> (N, err, irr, rec, res).
#: ``random`` is pooled over three seeds; no-evict is the same at every budget.
PAPER_CELLS: Mapping[str, Mapping[int, tuple[int, int, int, int, int]]] = {
    "no-evict": {80_000: (336, 95, 0, 38, 57)},
    "fifo": {80_000: (336, 124, 55, 22, 47), 30_000: (336, 243, 199, 3, 41), 8_000: (336, 299, 262, 0, 37)},
    "random": {80_000: (1008, 387, 168, 61, 158), 30_000: (1008, 708, 567, 11, 130), 8_000: (1008, 894, 754, 3, 137)},
    "redundancy": {80_000: (336, 127, 51, 25, 51), 30_000: (336, 242, 198, 3, 41), 8_000: (336, 300, 263, 1, 36)},
    "llm-importance": {80_000: (332, 102, 34, 23, 45), 30_000: (332, 239, 196, 4, 39), 8_000: (332, 302, 265, 0, 37)},
    "control": {80_000: (336, 244, 204, 0, 40), 30_000: (336, 311, 276, 0, 35), 8_000: (336, 327, 295, 0, 32)},
}


def dataset_path(args: argparse.Namespace) -> Path:
    """The 500-question file: ``--data`` or a freshly generated one (seed 0, defaults)."""
    if args.data:
        return Path(args.data)
    path = Path(args.work_dir or tempfile.mkdtemp()) / "synthetic-500.json"
    if not path.exists():
        write_dataset(generate(500, 0), path)
    return path


def baseline_prompts(audit: Audit) -> list[tuple[str, str, str, str, str]]:
    """Per question: (type, reference, oracle, no-evict regime-(b) and restored reader prompts)."""
    out = []
    for p in audit.questions:
        h = p.history
        gold = sorted(h.gold)
        ranked = audit.rank(p, np.ones(len(h.units), dtype=bool))  # no-evict keeps every unit
        b = inject([], ranked, h.sizes, audit.config.cap)
        restored = inject(gold, ranked, h.sizes, audit.config.cap)
        prompts = [audit.reader_request(h, ctx).messages[-1][1] for ctx in (gold, b, restored)]
        out.append((h.question.question_type, h.question.answer, *prompts))
    return out


def baseline_figures(knobs: ReaderKnobs, prompts: Sequence[tuple[str, str, str, str, str]], reader: FakeReader) -> dict[str, int]:
    """Oracle-answerable, and the no-evict regime-(b) err/rec/res, for these knobs."""
    reader.knobs = knobs
    n = err = rec = res = 0
    for _qtype, reference, oracle, b, restored in prompts:
        if normalise(reader.answer(oracle)) != normalise(reference):
            continue
        n += 1
        if normalise(reader.answer(b)) == normalise(reference):
            continue
        err += 1
        if normalise(reader.answer(restored)) == normalise(reference):
            rec += 1
        else:
            res += 1
    return {"questions": len(prompts), "N": n, "err": err, "rec": rec, "res": res}


def loss(fig: Mapping[str, int]) -> float:
    """Squared binomial z-scores of the calibration figures against the paper's."""
    total = 0.0
    p_oracle = PAPER_ORACLE[0] / PAPER_ORACLE[1]
    total += ((fig["N"] / fig["questions"] - p_oracle) / math.sqrt(p_oracle * (1 - p_oracle) / fig["questions"])) ** 2
    n_paper, err_paper, _irr, rec_paper, res_paper = PAPER_CELLS["no-evict"][80_000]
    for key, value in (("err", err_paper), ("rec", rec_paper), ("res", res_paper)):
        p = value / n_paper
        total += ((fig[key] / max(1, fig["N"]) - p) / math.sqrt(p * (1 - p) / max(1, fig["N"]))) ** 2
    return total


def print_calibration(fig: Mapping[str, int]) -> None:
    """The calibration figures, ours beside the paper's, with a 95% binomial margin on ours."""
    n_paper, err_paper, _irr, rec_paper, res_paper = PAPER_CELLS["no-evict"][80_000]
    print("calibration (the only figures the reader's knobs were chosen on)")
    print(f"{'figure':<26}{'ours':>18}{'paper':>18}{'ours +- 1.96 se':>18}")

    def row(label: str, k: int, n: int, paper_k: int, paper_n: int) -> None:
        p = k / max(1, n)
        se = math.sqrt(p * (1 - p) / max(1, n))
        inside = abs(paper_k / paper_n - p) <= 1.96 * se
        print(f"{label:<26}{f'{k}/{n} = {p:.3f}':>18}{f'{paper_k}/{paper_n} = {paper_k / paper_n:.3f}':>18}"
              f"{f'{p - 1.96 * se:.3f}-{p + 1.96 * se:.3f}':>18}  {'in' if inside else 'OUT'}")

    row("oracle-answerable", fig["N"], fig["questions"], *PAPER_ORACLE)
    row("no-evict accuracy (b)", fig["N"] - fig["err"], fig["N"], n_paper - err_paper, n_paper)
    row("no-evict recoverable / N", fig["rec"], fig["N"], rec_paper, n_paper)
    row("no-evict residual / N", fig["res"], fig["N"], res_paper, n_paper)


def calibrate(prompts: Sequence[tuple[str, str, str, str, str]], reader: FakeReader) -> None:
    """Search the knobs on the calibration figures only; print the best few."""
    base = ReaderKnobs()
    results = []
    for base_error, crowding, persistence in itertools.product(
        (0.10, 0.13, 0.16, 0.19, 0.22), (0.0, 0.02, 0.04, 0.07, 0.1), (0.7, 0.8, 0.85, 0.9, 0.95)
    ):
        knobs = replace(base, base_error=base_error, crowding=crowding, persistence=persistence)
        fig = baseline_figures(knobs, prompts, reader)
        results.append((loss(fig), knobs, fig))
    results.sort(key=lambda x: x[0])
    for value, knobs, fig in results[:8]:
        print(f"loss {value:6.2f}  base {knobs.base_error:g} crowding {knobs.crowding:g} "
              f"persistence {knobs.persistence:g}  -> {fig}")


def grid_80k(audit: Audit) -> list[dict[str, Any]]:
    """Every registered policy's 80k cell (both regimes, every seed of ``random``)."""
    records: list[dict[str, Any]] = []
    for policy in default_registry().values():
        records += audit.run_cell(policy, 80_000).records
    return records


def print_out_of_sample(records: Sequence[Mapping[str, Any]], resamples: int) -> None:
    """Every regime-(b) 80k cell beside the paper's, with whether the paper's figure is in our interval."""
    analysis = analyse(records, resamples=resamples)
    readers = sorted({str(r["reader"]) for r in records})
    print("\nout of sample: regime (b), 80k (nothing was tuned on these; a result, not a target)")
    print(f"{'policy':<16}{'':>6}{'N':>6}{'err':>6}{'irr':>6}{'rec':>6}{'res':>6}"
          f"{'two-bin [95% CI]':>24}{'irr/N [95% CI]':>24}{'accuracy [95% CI]':>24}{'gold evicted':>14}")
    for policy, budgets in PAPER_CELLS.items():
        cell = analysis.cell(policy, 80_000, "b", readers[0])
        if cell is None:
            continue
        n, err, irr, rec, res = budgets[80_000]
        paper = {"two_bin": irr / (irr + rec) if irr + rec else None, "irr_rate": irr / n, "accuracy": 1 - err / n}

        def show(value: float | None, lo: float | None, hi: float | None, ref: float | None) -> str:
            if value is None:
                return "-"
            inside = "" if ref is None or lo is None or hi is None else (" in" if lo <= ref <= hi else " OUT")
            return f"{value:.2f} [{lo if lo is not None else float('nan'):.2f},{hi if hi is not None else float('nan'):.2f}]{inside}"

        def ref(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        print(f"{policy:<16}{'ours':>6}{cell.N:>6}{cell.err:>6}{cell.irr:>6}{cell.rec:>6}{cell.res:>6}"
              f"{show(cell.two_bin_share, cell.two_bin_lo, cell.two_bin_hi, paper['two_bin']):>24}"
              f"{show(cell.irr_rate, cell.irr_rate_lo, cell.irr_rate_hi, paper['irr_rate']):>24}"
              f"{show(cell.accuracy, cell.accuracy_lo, cell.accuracy_hi, paper['accuracy']):>24}"
              f"{ref(cell.gold_evicted_rate):>14}")
        print(f"{'':<16}{'paper':>6}{n:>6}{err:>6}{irr:>6}{rec:>6}{res:>6}"
              f"{ref(paper['two_bin']):>24}{ref(paper['irr_rate']):>24}{ref(paper['accuracy']):>24}")
    print("('in': the paper's figure lies inside our 95% interval; 'OUT': it does not)")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the calibration figures and the out-of-sample 80k table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a LongMemEval-S file (default: the 500-question synthetic file)")
    parser.add_argument("--work-dir", help="where the synthetic file is generated (default: a temporary directory)")
    parser.add_argument("--calibrate", action="store_true", help="search the knobs on the baseline figures")
    parser.add_argument("--no-grid", action="store_true", help="skip the out-of-sample 80k table")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    args = parser.parse_args(argv)
    dataset = load_dataset(dataset_path(args))
    reader = FakeReader()
    audit = Audit(dataset, AuditConfig(budgets=(80_000,)), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    prompts = baseline_prompts(audit)
    if args.calibrate:
        calibrate(prompts, reader)
    print_calibration(baseline_figures(ReaderKnobs(), prompts, reader))
    if not args.no_grid:
        print_out_of_sample(grid_80k(audit), args.resamples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
