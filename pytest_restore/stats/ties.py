"""Whether an importance policy's decisions are mostly ties: the scorer's score distribution over the units.

``llm-importance`` evicts the unit with the lowest score, ties to the older
unit. A scorer that gives most units the same few scores makes most
evictions ties, broken oldest first: the policy then behaves like FIFO
within each score, and its cells say little about the scorer's judgement.
From each record's ``importance_scores`` (the units of its question's
history at each score 1-10; each question counted once per policy and
scorer), pooled over the questions:

**The rule**: the decisions are *mostly ties* when the two most common
scores hold at least :data:`TIE_SHARE` (80%) of the units. (A scorer
spreading its scores evenly over ten values puts 20% on the top two; one
that answers 1 for most snippets and 10 for the rest puts 100% there.)

The same rule for any other policy that decides by a score of its own
(``memory.eviction.ScoredPolicy``: ``control`` among the built-in ones, or a
user's). Its scores need not come from a 1-10 scale (control's are fact
densities), so each record carries ``score_ties``: its history's units and
how many of them hold the history's two most common scores, counted within
the history, where the policy's decisions are made; pooled over the
questions (each once), the decisions are mostly ties when those hold at
least :data:`TIE_SHARE` of the units.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_restore.record import Record

__all__ = ["TIE_SHARE", "ScoreDistribution", "ScoreTies", "is_mostly_ties", "score_distributions", "score_ties"]

#: The share of units the two most common scores must hold for the decisions to be mostly ties.
TIE_SHARE = 0.80


def is_mostly_ties(units: int, top_share: float) -> bool:
    """The rule of the module docstring: some units, and the two most common scores hold :data:`TIE_SHARE` of them."""
    return units > 0 and top_share >= TIE_SHARE


@dataclass(frozen=True)
class ScoreDistribution:
    """One importance policy's scores over the units of its questions' histories."""

    policy: str
    scorer: str
    questions: int
    #: units at each score 1..10
    counts: tuple[int, ...]

    @property
    def units(self) -> int:
        """Units scored."""
        return sum(self.counts)

    def share(self, score: int) -> float:
        """The share of units at ``score`` (1-10)."""
        return self.counts[score - 1] / self.units if self.units else 0.0

    @property
    def top(self) -> list[int]:
        """The two most common scores, most common first (the lower score first on a tie)."""
        return sorted(range(1, 11), key=lambda s: (-self.counts[s - 1], s))[:2]

    @property
    def top_share(self) -> float:
        """The share of units the two most common scores hold."""
        return sum(self.share(s) for s in self.top)

    @property
    def mostly_ties(self) -> bool:
        """The rule of the module docstring."""
        return is_mostly_ties(self.units, self.top_share)

    def to_json(self) -> dict[str, object]:
        """Plain values (``summary.json``)."""
        return {
            "policy": self.policy,
            "scorer": self.scorer,
            "questions": self.questions,
            "counts": list(self.counts),
            "top_share": round(self.top_share, 6),
            "mostly_ties": self.mostly_ties,
        }


def score_distributions(records: Iterable[Record]) -> list[ScoreDistribution]:
    """One distribution per (policy, scorer) whose records carry scores, each question counted once."""
    seen: dict[tuple[str, str], dict[str, tuple[int, ...]]] = {}
    for record in records:
        if record.importance_scores is None:
            continue
        per = seen.setdefault((record.policy, record.scorer or "?"), {})
        per.setdefault(record.question_id, record.importance_scores)
    out = []
    for (policy, scorer), per in sorted(seen.items()):
        counts = tuple(sum(c[i] for c in per.values()) for i in range(10))
        out.append(ScoreDistribution(policy, scorer, len(per), counts))
    return out


@dataclass(frozen=True)
class ScoreTies:
    """A policy deciding by its own per-unit score: how many units share their history's two most common scores."""

    policy: str
    questions: int
    units: int
    #: of :attr:`units`, those at their history's two most common scores
    tied: int

    @property
    def top_share(self) -> float:
        """The share of units their history's two most common scores hold."""
        return self.tied / self.units if self.units else 0.0

    @property
    def mostly_ties(self) -> bool:
        """The rule of the module docstring."""
        return is_mostly_ties(self.units, self.top_share)

    def to_json(self) -> dict[str, object]:
        """Plain values (``summary.json``)."""
        return {
            "policy": self.policy,
            "questions": self.questions,
            "units": self.units,
            "tied": self.tied,
            "top_share": round(self.top_share, 6),
            "mostly_ties": self.mostly_ties,
        }


def score_ties(records: Iterable[Record]) -> list[ScoreTies]:
    """One per policy whose records carry ``score_ties``, each question counted once (its first seed's)."""
    seen: dict[str, dict[str, tuple[int, int]]] = {}
    for record in records:
        if record.score_ties is not None:
            seen.setdefault(record.policy, {}).setdefault(record.question_id, record.score_ties)
    return [
        ScoreTies(policy, len(per), sum(u for u, _ in per.values()), sum(t for _, t in per.values()))
        for policy, per in sorted(seen.items())
    ]
