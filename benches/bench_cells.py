"""The audit's cells in one process: ``python benches/bench_cells.py [--data FILE] [--questions N]``.

Runs every built-in policy of the default grid (and, with ``--derived``,
``session-summary`` and ``fact-extract``) at each of the dataset's default
budgets with the fake reader, judge and scorer, as the grid's cells do
(``Audit.run_cell``: stores, contexts, model calls through the memo, gold
fates, records), and prints per policy:

- the wall and CPU time of its cells (best of ``--repeats`` by CPU time, each on a fresh
  :class:`~pytest_restore.audit.run.Audit`, so no cell or store is reused);
- how often the audit ran a policy's eviction loop (``retain``, ``evict``,
  ``eviction_arrivals`` calls) and ranked a store (``Audit.rank`` calls), per
  (question, seed) store;
- the sha256 of the cells' records (JSON lines, sorted keys): a change that
  only makes the audit faster leaves it as it was.

The data is the embedded default (100 questions) unless ``--data`` names a
file (LoCoMo's ``locomo10.json.gz`` works); nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.loaders import load_data
from pytest_restore.memory.derived import default_policies
from pytest_restore.memory.eviction import Policy
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.synthetic.embedded import embedded_dataset

#: The policies of the default grid (the derived systems join with ``--derived``).
GRID = ("no-evict", "fifo", "random", "redundancy", "llm-importance", "control")
DERIVED = ("session-summary", "fact-extract")
#: The policy methods that run an eviction loop, counted per call.
LOOPS = ("retain", "evict", "eviction_arrivals", "trace")


def counted(policy: Policy, calls: Counter[str]) -> Policy:
    """``policy`` with each call of its eviction loops counted in ``calls`` (an instance attribute shadows the method)."""
    depth: list[str] = []
    for name in LOOPS:
        method = getattr(policy, name, None)
        if method is None:
            continue

        def wrap(*args: Any, _method: Callable[..., Any] = method, _name: str = name, **kwargs: Any) -> Any:
            if not depth:  # a loop the audit asked for, not one a policy's method runs inside another
                calls[_name] += 1
            depth.append(_name)
            try:
                return _method(*args, **kwargs)
            finally:
                depth.pop()

        setattr(policy, name, wrap)
    return policy


def count_ranks(audit: Audit, calls: Counter[str]) -> None:
    """Count each ranking of a store the audit asks for in ``calls['rank']``."""
    rank = audit.rank

    def counted_rank(*args: Any, **kwargs: Any) -> list[int]:
        calls["rank"] += 1
        return rank(*args, **kwargs)

    audit.rank = counted_rank  # type: ignore[method-assign]


Result = tuple[float, float, Counter[str], int, str]


def run(data: Path, questions: int | None, names: tuple[str, ...]) -> dict[str, Result]:
    """Per policy: wall and CPU seconds of its cells, the loop and rank calls, the stores, the records' sha256."""
    dataset = load_data(data)
    out = {}
    for name in names:
        reader = FakeReader()
        config = AuditConfig(budgets=dataset.budgets, questions=questions)
        audit = Audit(dataset, config, reader=reader, judge=FakeJudge(), scorer=FakeScorer())
        reader.learn(p.history for p in audit.questions)
        calls: Counter[str] = Counter()
        count_ranks(audit, calls)
        policy = counted(default_policies()[name], calls)
        digest = hashlib.sha256()
        stores = 0
        start, cpu = time.perf_counter(), time.process_time()
        for budget in dataset.budgets:
            cell = audit.run_cell(policy, budget)
            stores += len(cell.stores)
            for r in cell.records:
                digest.update(json.dumps(r.to_json(), sort_keys=True).encode() + b"\n")
        out[name] = (time.perf_counter() - start, time.process_time() - cpu, calls, stores, digest.hexdigest())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a data file (default: the embedded synthetic default, 100 questions)")
    parser.add_argument("--questions", type=int, default=None, help="a stratified subset of N questions")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--derived", action="store_true", help="also session-summary and fact-extract")
    args = parser.parse_args(argv)
    data = Path(args.data) if args.data else embedded_dataset(Path(tempfile.mkdtemp(prefix="bench-cells-")))
    names = GRID + (DERIVED if args.derived else ())
    best: dict[str, Result] = {}
    for _ in range(max(args.repeats, 1)):
        for name, result in run(data, args.questions, names).items():
            if name not in best or result[1] < best[name][1]:
                best[name] = result
    print(f"data: {data.name}; budgets and seeds: the dataset's defaults; best of {args.repeats} by CPU time")
    print(f"{'policy':<16} {'wall s':>7} {'CPU s':>7} {'stores':>7} {'loops/store':>12} {'ranks/store':>12}  records sha256")
    for name, (wall, cpu, calls, stores, digest) in best.items():
        loops = sum(calls[n] for n in LOOPS)
        print(
            f"{name:<16} {wall:7.2f} {cpu:7.2f} {stores:7d} {loops / max(stores, 1):12.2f} "
            f"{calls['rank'] / max(stores, 1):12.2f}  {digest[:16]}"
        )
    print(f"{'total':<16} {sum(b[0] for b in best.values()):7.2f} {sum(b[1] for b in best.values()):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
