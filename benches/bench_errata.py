"""The LoCoMo grid with and without a corrections file, side by side: which errors change bin.

    python benches/bench_errata.py --locomo locomo10.json.gz --errata errors.json [--apply evidence,answers]

With the fake reader, judge and scorer at LoCoMo's default budgets, every
policy's regime-(b) cell is run on the dataset as published and on the
dataset with the corrections applied (``--restore-errata``'s
:func:`pytest_restore.data.errata.apply_errata`). It prints:

1. the corrections read, by type, and what each changed;
2. the grid, both ways: N, errors and the three bins per cell;
3. every record both runs share (the same question, policy, budget and
   seed), by its bin as published -> its bin with the corrections: how many
   errors change bin, and which way. "correct" and "not in N" (the oracle
   missed it) are counted as places too, so an error that disappears or
   appears is seen.

An error moving from irreversible or residual to recoverable (or the
reverse) is the audit's verdict on a question changing because its evidence
label changed, not because the memory did: the size of that movement is how
far the published labels bias the bins. The reader here is simulated, so the
figures say how the labels move a simulated reader's bins; run the grid with
a real reader (``--restore-errata``) for the real figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.errata import apply_errata, load_errata, parse_parts
from pytest_restore.data.loaders import load_data
from pytest_restore.memory.eviction import default_registry
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.record import Record

PLACES = ("correct", "irreversible", "recoverable", "residual", "not in N", "absent")


def place(record: Record | None) -> str:
    """Where a record sits: its bin, correct, out of N, or absent (its question was excluded)."""
    if record is None:
        return "absent"
    if not record.conditions.oracle.correct or record.excluded is not None:
        return "not in N"
    return record.bin or "correct"


def grid(dataset: Dataset) -> dict[tuple[str, int, int, str], Record]:
    """Every policy's regime-(b) records at the dataset's budgets, by (question, policy, budget, seed)."""
    reader = FakeReader()
    audit = Audit(dataset, AuditConfig(budgets=dataset.budgets), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    out: dict[tuple[str, int, int, str], Record] = {}
    for policy in default_registry().values():
        for budget in dataset.budgets:
            for r in audit.run_cell(policy, budget).records:
                if r.regime == "b":
                    out[(r.policy, r.budget, r.seed, r.question_id)] = r
    return out


def cells(records: Mapping[tuple[str, int, int, str], Record]) -> dict[tuple[str, int], Counter[str]]:
    """Per policy x budget: N and the bins."""
    out: dict[tuple[str, int], Counter[str]] = {}
    for (policy, budget, _seed, _q), r in records.items():
        c = out.setdefault((policy, budget), Counter())
        where = place(r)
        if where != "not in N":
            c["N"] += 1
            if where != "correct":
                c["err"] += 1
                c[where] += 1
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print the corrections, the two grids and the bins' movement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", required=True, help="LoCoMo file (locomo10.json or .json.gz)")
    parser.add_argument("--errata", required=True, help="corrections file (the LoCoMo audit's errors.json)")
    parser.add_argument("--apply", default="evidence", help="parts applied: evidence, answers or both (default: evidence)")
    args = parser.parse_args(argv)
    dataset = load_data(args.locomo)
    data, name, corrections = load_errata(args.errata, dataset)
    fixed, summary = apply_errata(dataset, data, name, corrections, parse_parts(args.apply))
    print(f"{summary.read} corrections read ({name}); parts applied: {', '.join(summary.parts)}")
    print(f"{'type':<20}" + "".join(f"{k:>14}" for k in summary.COUNTS))
    for kind, counts in summary.by_type:
        print(f"{kind:<20}" + "".join(f"{counts[k]:>14}" for k in summary.COUNTS))
    started = time.perf_counter()
    before, after = grid(dataset), grid(fixed)
    print(f"\nboth grids in {time.perf_counter() - started:.1f} s (fake reader, judge and scorer; regime b)")
    cb, ca = cells(before), cells(after)
    head = "".join(f"{k:>6}" for k in ("N", "err", "irr", "rec", "res"))
    print(f"\n{'policy':<16}{'budget':>8}   published{head}   corrected{head}")
    for key in sorted(cb, key=lambda k: (k[0], -k[1])):
        row = []
        for c in (cb[key], ca.get(key, Counter())):
            row.append("".join(f"{c[k]:>6}" for k in ("N", "err", "irreversible", "recoverable", "residual")))
        print(f"{key[0]:<16}{key[1]:>8}   {'':>9}{row[0]}   {'':>9}{row[1]}")
    moves: Counter[tuple[str, str]] = Counter()
    for key in before.keys() | after.keys():
        moves[(place(before.get(key)), place(after.get(key)))] += 1
    errors = ("irreversible", "recoverable", "residual")
    changed = sum(n for (a, b), n in moves.items() if a != b and (a in errors or b in errors))
    among = sum(n for (a, b), n in moves.items() if a != b and a in errors and b in errors)
    print(f"\nrecords (question x policy x budget x seed): {len(before.keys() | after.keys())}; "
          f"errors changing place: {changed} (of which bin to bin: {among})")
    print(f"{'published -> corrected':<28}" + "".join(f"{p:>14}" for p in PLACES))
    for a in PLACES:
        if any(moves[(a, b)] for b in PLACES):
            print(f"{a:<28}" + "".join(f"{moves[(a, b)]:>14}" for b in PLACES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
