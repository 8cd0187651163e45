"""The record-level construct checks of one grid cell (PROTOCOL section 5), each failure one readable line.

Only oracle-answerable records are binned, a store of raw units has no
distorted error, and FIFO's store at a tighter
budget lies inside its store at every looser one. The checks on a cell's
counts (the bins add up to the errors, the forced-gold regime has no
recoverable error, ``no-evict`` no irreversible one) read the cell's
analysis: :meth:`pytest_restore.stats.analysis.Analysis.construct_failures`.
"""

from __future__ import annotations

import numpy as np

from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.record import REGIMES


def construct_checks(run: CellRun, audit: Audit | None = None) -> list[str]:
    """The record-level construct checks of one cell; each failure is one readable line."""
    failures: list[str] = []
    for regime in REGIMES:
        recs = [r for r in run.records if r.regime == regime]
        label = f"{run.policy} @ {run.budget} regime ({regime})"
        stray = [r.question_id for r in recs if r.bin is not None and not r.enters_n]
        if stray:
            failures.append(f"{label}: {len(stray)} binned records are not oracle-answerable, e.g. {stray[0]}")
        # a store of raw units: regime (a)'s context is the restored one once no gold is evicted
        raw = [r.question_id for r in recs if r.bin == "distorted" and r.memories is None]
        if raw:
            failures.append(f"{label}: {len(raw)} distorted errors on a store of raw units (must be 0), e.g. {raw[0]}")
    if run.policy == "fifo" and audit is not None:
        failures.extend(fifo_containment(run, audit))
    return failures


def fifo_containment(run: CellRun, audit: Audit) -> list[str]:
    """FIFO's store at a tighter budget must lie inside its store at every looser one."""
    from pytest_restore.memory.eviction import Fifo

    fifo = Fifo()
    failures = []
    looser = [b for b in audit.config.budgets if b > run.budget]
    for p in audit.questions:
        key = (p.question.question_id, 0)
        if key not in run.stores:
            continue
        tight = run.stores[key]
        for b in looser:
            loose = audit.retain(fifo, p, b, 0, {})
            if np.any(tight & ~loose):
                failures.append(f"fifo: store of {key[0]} at {run.budget} is not inside its store at {b}")
    return failures
