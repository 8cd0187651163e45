"""What a dataset's text looks like to the eviction policies: the statistics that decide their outcomes.

A policy never sees the gold, but the gold's text decides what it does with
it: ``llm-importance`` and the fake scorer rate fact-bearing turns higher,
``redundancy`` evicts the older unit of the most similar pair, and
``fifo``/``random`` are blind to text. So a simulated world stands in for real
text only where these statistics agree (``benches/bench_world.py --locomo``
prints them for the synthetic generator beside LoCoMo):

- ``digit_rate`` and ``first_person_rate``: shares of non-gold turns holding
  a digit, and a first-person word (``I``, ``my``, ``we``, ...);
- ``gold_density_percentile`` and ``gold_length_percentile``: where a gold
  turn's fact density (:func:`pytest_restore.memory.eviction.fact_density`)
  and token length fall among the turns of its history (median over gold
  turns; 0.5 is ordinary);
- ``gold_density`` and ``other_density``: median fact density of gold turns
  and of the other turns;
- ``gold_similarity_percentile``: where a gold turn's best similarity to any
  other unit (what ``redundancy`` ranks by) falls among its history's units
  (median; near 0: the gold is the most unique unit and never the victim);
- ``next_turn_most_similar``: the share of gold turns whose most similar unit
  (by ``redundancy``'s own similarity,
  :func:`pytest_restore.memory.eviction.similarity_matrix`) is the turn right
  after it: the reply that restates it, which ``redundancy`` keeps while it
  evicts the older gold.

Every statistic is over turn-granularity histories; a gold turn several
questions share (one LoCoMo conversation) counts once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from pytest_restore.data.units import Granularity, History
from pytest_restore.data.words import FIRST_PERSON
from pytest_restore.memory.eviction import fact_density, similarity_matrix

__all__ = ["DataProfile", "profile"]

_DIGIT = re.compile(r"\d")
_FIRST_PERSON = re.compile(r"(?<![\w'])(?:" + "|".join(sorted(map(re.escape, FIRST_PERSON), key=len, reverse=True)) + r")(?![\w'])", re.IGNORECASE)


@dataclass(frozen=True)
class DataProfile:
    """The statistics of one dataset's text (see the module docstring)."""

    histories: int
    gold_turns: int
    digit_rate: float
    first_person_rate: float
    gold_density_percentile: float
    gold_length_percentile: float
    gold_density: float
    other_density: float
    gold_similarity_percentile: float
    next_turn_most_similar: float

    def as_dict(self) -> dict[str, float]:
        """The statistics by name."""
        return {k: float(v) for k, v in asdict(self).items()}


def profile(histories: Iterable[History]) -> DataProfile:
    """The :class:`DataProfile` of these turn-granularity histories (each distinct history once)."""
    gold_by_history: dict[int, tuple[History, set[int]]] = {}
    for history in histories:
        if history.granularity is not Granularity.TURN:
            raise ValueError("a data profile reads turn-granularity histories")
        entry = gold_by_history.setdefault(id(history.units), (history, set()))
        entry[1].update(history.gold)
    other_digit = other_first = others = 0
    density_pct: list[float] = []
    length_pct: list[float] = []
    gold_density: list[float] = []
    other_density: list[float] = []
    next_best: list[bool] = []
    similarity_pct: list[float] = []
    for history, gold in gold_by_history.values():
        units = history.units
        if not gold or len(units) < 2:
            continue
        contents = [u.content for u in units]
        density = np.array([fact_density(c) for c in contents])
        sizes = np.asarray(history.sizes)
        similarity = similarity_matrix(units)
        best = similarity.argmax(axis=1)
        best_value = similarity.max(axis=1)
        for i, content in enumerate(contents):
            if i in gold:
                density_pct.append(float((density < density[i]).mean()))
                length_pct.append(float((sizes < sizes[i]).mean()))
                gold_density.append(float(density[i]))
                next_best.append(int(best[i]) == i + 1)
                similarity_pct.append(float((best_value < best_value[i]).mean()))
            else:
                others += 1
                other_digit += _DIGIT.search(content) is not None
                other_first += _FIRST_PERSON.search(content) is not None
                other_density.append(float(density[i]))
    if not density_pct:
        raise ValueError("no history with gold turns to profile")
    return DataProfile(
        histories=len(gold_by_history),
        gold_turns=len(density_pct),
        digit_rate=other_digit / max(1, others),
        first_person_rate=other_first / max(1, others),
        gold_density_percentile=float(np.median(density_pct)),
        gold_length_percentile=float(np.median(length_pct)),
        gold_density=float(np.median(gold_density)),
        other_density=float(np.median(other_density)) if other_density else 0.0,
        gold_similarity_percentile=float(np.median(similarity_pct)),
        next_turn_most_similar=float(np.mean(next_best)),
    )
