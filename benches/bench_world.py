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

With ``--locomo FILE`` (``locomo10.json``, or the ``.json.gz``), the simulated
world is also checked on real text:

3. **Data statistics** (:mod:`pytest_restore.memory.profile`) of the synthetic
   file beside LoCoMo's, with LoCoMo's range over its ten conversations: the
   digit and first-person rates of non-gold turns, where the gold's fact density
   and length fall in its history, how often the gold's most similar unit is the
   turn right after it.
4. **The fake-reader grid on both**: every policy's regime-(b) cells at each
   dataset's default budgets (largest, middle, smallest), and which pairwise
   policy orderings (by irreversible rate) hold on both datasets.
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

import numpy as np

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import History
from pytest_restore.memory.eviction import default_registry
from pytest_restore.memory.profile import DataProfile, profile
from pytest_restore.memory.retrieval import inject
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer, ReaderKnobs, normalise
from pytest_restore.record import Record
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


def grid_80k(audit: Audit) -> list[Record]:
    """Every registered policy's 80k cell (both regimes, every seed of ``random``)."""
    records: list[Record] = []
    for policy in default_registry().values():
        records += audit.run_cell(policy, 80_000).records
    return records


def print_out_of_sample(records: Sequence[Record], resamples: int) -> None:
    """Every regime-(b) 80k cell beside the paper's, with whether the paper's figure is in our interval."""
    analysis = analyse(records, resamples=resamples)
    readers = sorted({r.reader for r in records})
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


#: The statistics the world check prints, with how each reads.
PROFILE_ROWS: tuple[tuple[str, str], ...] = (
    ("digit_rate", "non-gold turns with a digit"),
    ("first_person_rate", "non-gold turns with a first-person word"),
    ("gold_density_percentile", "gold's fact-density percentile in its history"),
    ("gold_length_percentile", "gold's length percentile in its history"),
    ("gold_density", "median fact density, gold turns"),
    ("other_density", "median fact density, other turns"),
    ("gold_similarity_percentile", "gold's best-similarity percentile in its history"),
    ("next_turn_most_similar", "gold whose most similar unit is the next turn"),
)


def profiles_by_history(histories: Sequence[History]) -> list[DataProfile]:
    """One profile per distinct history (LoCoMo: per conversation), for the real range."""
    groups: dict[str, list[History]] = {}
    for h in histories:
        groups.setdefault(h.question.history_key, []).append(h)
    return [profile(g) for g in groups.values()]


def print_profiles(synthetic: DataProfile, real: DataProfile, per_history: Sequence[DataProfile]) -> None:
    """The synthetic file's statistics beside LoCoMo's, with LoCoMo's range over its conversations."""
    print("\ndata statistics: synthetic beside LoCoMo (turn units; range: LoCoMo's ten conversations)")
    print(f"{'statistic':<50}{'synthetic':>11}{'LoCoMo':>9}{'LoCoMo range':>16}")
    for key, label in PROFILE_ROWS:
        ours, theirs = getattr(synthetic, key), getattr(real, key)
        values = [getattr(p, key) for p in per_history]
        lo, hi = min(values), max(values)
        inside = "in" if lo <= ours <= hi else "OUT"
        print(f"{label:<50}{ours:>11.3f}{theirs:>9.3f}{f'{lo:.3f}-{hi:.3f}':>16}  {inside}")
    print(f"({synthetic.gold_turns} synthetic gold turns in {synthetic.histories} histories; "
          f"{real.gold_turns} LoCoMo gold turns in {real.histories} conversations)")


def grid_cells(audit: Audit, budgets: Sequence[int]) -> dict[tuple[str, int], tuple[float, float | None, float]]:
    """Every registered policy at ``budgets``, regime (b): (irr/N, two-bin share, accuracy) per cell."""
    out: dict[tuple[str, int], tuple[float, float | None, float]] = {}
    for policy in default_registry().values():
        for budget in budgets:
            records = [r for r in audit.run_cell(policy, budget).records if r.regime == "b" and r.enters_n]
            n = len(records)
            irr = sum(r.bin == "irreversible" for r in records)
            rec = sum(r.bin == "recoverable" for r in records)
            correct = sum(bool(r.conditions.policy.correct) for r in records)
            out[(policy.name, budget)] = (irr / max(1, n), irr / (irr + rec) if irr + rec else None, correct / max(1, n))
    return out


def print_grids(synthetic: Audit, real: Audit) -> None:
    """The fake-reader grid on both datasets, side by side, and which policy orderings hold on both."""
    sb, rb = synthetic.config.budgets, real.config.budgets
    ours, theirs = grid_cells(synthetic, sb), grid_cells(real, rb)
    print("\nthe fake-reader grid, regime (b): synthetic (its budgets) beside LoCoMo (its budgets)")
    print(f"{'policy':<16}{'level':>8}{'budget':>9}{'irr/N':>7}{'2-bin':>7}{'acc':>6}{'budget':>10}{'irr/N':>7}{'2-bin':>7}{'acc':>6}")

    def show(cell: tuple[float, float | None, float]) -> str:
        irr, two, acc = cell
        return f"{irr:>7.2f}{'-' if two is None else f'{two:.2f}':>7}{acc:>6.2f}"

    levels = ("largest", "middle", "smallest")
    policies = list(default_registry())
    for policy in policies:
        for level, b_syn, b_real in zip(levels, sb, rb):
            print(f"{policy:<16}{level:>8}{b_syn:>9,}{show(ours[(policy, b_syn)])}{b_real:>10,}{show(theirs[(policy, b_real)])}")
    print("\npolicy orderings by irreversible rate (a < b: a loses less gold for good), per budget level")
    for level, b_syn, b_real in zip(levels, sb, rb):
        held, broke = [], []
        evicting = [p for p in policies if p != "no-evict"]
        for i, a in enumerate(evicting):
            for b in evicting[i + 1:]:
                ds = ours[(a, b_syn)][0] - ours[(b, b_syn)][0]
                dr = theirs[(a, b_real)][0] - theirs[(b, b_real)][0]
                first, second = (a, b) if ds <= 0 else (b, a)
                if abs(ds) < 0.02 and abs(dr) < 0.02:
                    held.append(f"{a} ~ {b}")
                elif (ds < 0) == (dr < 0) and abs(ds) >= 0.02 and abs(dr) >= 0.02:
                    held.append(f"{first} < {second}")
                else:
                    on_real = theirs[(first, b_real)][0] - theirs[(second, b_real)][0]
                    broke.append(f"{first} < {second} on synthetic ({-abs(ds):+.2f}); on LoCoMo the same difference is {on_real:+.2f}")
        print(f"{level}: holds on both: {', '.join(held) or 'none'}")
        for line in broke:
            print(f"{'':>{len(level) + 2}}differs: {line}")
    print("(~: within 0.02 on both; orderings within 0.02 on one dataset count as differing)")


def world_check(synthetic: Dataset, locomo_path: str, sample: int) -> None:
    """The data statistics and the two grids (``--locomo``)."""
    real = load_data(locomo_path)
    if real.name != "locomo":
        raise SystemExit(f"--locomo {locomo_path}: read as {real.name}, not LoCoMo")
    real_reader = FakeReader()
    real_audit = Audit(real, AuditConfig(budgets=real.budgets), reader=real_reader, judge=FakeJudge(), scorer=FakeScorer())
    real_reader.learn(p.history for p in real_audit.questions)
    syn_reader = FakeReader()
    syn_audit = Audit(synthetic, AuditConfig(budgets=synthetic.budgets), reader=syn_reader, judge=FakeJudge(), scorer=FakeScorer())
    syn_reader.learn(p.history for p in syn_audit.questions)
    real_histories = [p.history for p in real_audit.questions]
    syn_histories = [p.history for p in syn_audit.questions][:sample]
    print_profiles(profile(syn_histories), profile(real_histories), profiles_by_history(real_histories))
    print_grids(syn_audit, real_audit)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the calibration figures and the out-of-sample 80k table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a LongMemEval-S file (default: the 500-question synthetic file)")
    parser.add_argument("--work-dir", help="where the synthetic file is generated (default: a temporary directory)")
    parser.add_argument("--calibrate", action="store_true", help="search the knobs on the baseline figures")
    parser.add_argument("--no-grid", action="store_true", help="skip the out-of-sample 80k table")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    parser.add_argument("--locomo", help="LoCoMo file (locomo10.json or .json.gz): check the world on real text")
    parser.add_argument("--profile-sample", type=int, default=60,
                        help="synthetic questions whose histories the statistics read (default: 60)")
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
    if args.locomo:
        world_check(dataset, args.locomo, args.profile_sample)
    return 0


if __name__ == "__main__":
    sys.exit(main())
