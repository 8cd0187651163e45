"""Restore-tightness ablations (docs/PROTOCOL.md section 9; the paper's A3 and appendix C).

The gold restore flips every irreversible case by definition. Three extra
conditions, run by the cell item over the irreversible records of regime (b)
when ``--restore-ablations`` is given, bound how much of that is slack:

======================  =======================  ==========================
ablation                store ranked             forced units
======================  =======================  ==========================
(i) surviving gold      ``S_P``                  ``G_q ∩ S_P``
(ii) retained store     none                     all of ``S_P`` (no cap)
(iii) placebo           ``S_P ∪ P``              ``P``
======================  =======================  ==========================

- (i) is regime (a)'s context exactly (same store, same forced units), so its
  verdict is regime (a)'s; the reader is asked again through the same
  procedure and the memo answers it. Where no gold survived, ``G_q ∩ S_P`` is
  empty and the context is regime (b)'s, so (i) cannot flip those cases.
- (ii) forces the whole retained store in chronological order. Forced units
  are never truncated, so the context can hold the whole budget (80k tokens).
- (iii) ``P`` is made of the non-gold units of the history (retained or
  evicted) nearest to the gold units, taken nearest first (ties to the
  earlier unit) while the total stays within 1.5x the gold's tokens, until it
  reaches the gold's tokens / 1.5: so ``P`` sits where the gold sat and its
  size is within [gold / 1.5, gold x 1.5]. When the candidates run out first
  the placebo is *not constructible*: it is counted, never scored. ``P``
  depends on the history alone, so it is the same for every policy.

Scope: every regime-(b) irreversible record (all policies, budgets and the
seeds of ``random``); the paper used seed 0 of the same records. Such a
record carries an :class:`~pytest_restore.record.Ablations`: the verdicts
``surviving_correct``, ``store_correct`` and ``placebo_correct`` (true, false
or null), ``excluded`` (``{}`` when all were scored, else a reason per
ablation that was not), the injected tokens of (ii) and the placebo's units
and tokens. Every other record's ``ablations`` is null.

The report's figure per ablation is the flip share: cases that came out
correct over cases scored, with a question-cluster bootstrap interval (the
statistics pass's resampling, seed and resample count), computed by the
analysis (:mod:`pytest_restore.stats.ablations`).
"""

from __future__ import annotations

import numpy as np

from pytest_restore.data.units import History
from pytest_restore.record import Record

#: Largest size ratio (either way) between a gold unit and its placebo.
PLACEBO_MAX_RATIO = 1.5

NOT_CONSTRUCTIBLE = "not constructible"

def placebo_units(history: History, max_ratio: float = PLACEBO_MAX_RATIO) -> list[int] | None:
    """The placebo for ``G_q``: nearby non-gold units of about the gold's total size.

    Non-gold units are taken nearest first (distance in positions to the
    closest gold unit, ties to the earlier unit); a unit joins when the total
    stays at most ``max_ratio`` times the gold's tokens, and the placebo is
    complete once the total reaches the gold's tokens over ``max_ratio``.
    ``None`` (not constructible) when the candidates run out first.
    """
    sizes = history.sizes
    gold = np.asarray(history.gold, dtype=np.int64)
    if gold.size == 0:
        return None
    target = int(sizes[gold].sum())
    low, high = target / max_ratio, target * max_ratio
    positions = np.arange(len(sizes), dtype=np.int64)
    distance = np.abs(positions[:, None] - gold[None, :]).min(axis=1)
    candidates = positions[distance > 0]
    order = candidates[np.lexsort((candidates, distance[candidates]))]
    chosen: list[int] = []
    total = 0
    for p in order:
        size = int(sizes[p])
        if total + size <= high:
            chosen.append(int(p))
            total += size
            if total >= low:
                return sorted(chosen)
    return None


def ran(record: Record) -> bool:
    """Whether the ablations ran on this record."""
    return record.ablations is not None


def is_case(record: Record) -> bool:
    """A regime-(b) irreversible record (what the ablations run on)."""
    return record.regime == "b" and record.bin == "irreversible" and record.excluded is None
