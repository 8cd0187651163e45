"""The restore-tightness ablations' figures: per reader, each ablation's flip share with its interval.

What the ablations are and how the audit runs them: :mod:`pytest_restore.audit.ablations`.
Here they are counted and resampled, on the statistics pass's question
universe, seed and resample count (:func:`summarise`), and counted per cell
(:func:`by_cell`); the analysis holds both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_restore.audit.ablations import NOT_CONSTRUCTIBLE, PLACEBO_MAX_RATIO, is_case
from pytest_restore.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Resampler,
)
from pytest_restore.record import ABLATIONS, Ablations, Record
from pytest_restore.stats.results import policy_order


@dataclass(frozen=True)
class AblationRow:
    """One ablation's result for one reader, pooled over every cell."""

    reader: str
    ablation: str  #: ``gold`` (the reference), ``surviving``, ``store`` or ``placebo``
    title: str
    cases: int  #: irreversible cases the ablations ran on
    scored: int  #: of those, with a verdict
    flipped: int  #: of those, answered correctly
    not_constructible: int
    failed: int  #: model calls that failed
    share: float | None
    ci_lo: float | None
    ci_hi: float | None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain values (rounded like the statistics pass)."""
        return {
            "reader": self.reader,
            "ablation": self.ablation,
            "title": self.title,
            "cases": self.cases,
            "scored": self.scored,
            "flipped": self.flipped,
            "not_constructible": self.not_constructible,
            "failed": self.failed,
            "share": _round(self.share),
            "ci_lo": _round(self.ci_lo),
            "ci_hi": _round(self.ci_hi),
            "note": self.note,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6) + 0.0


def _resampled_interval(
    resampler: Resampler, num: np.ndarray[Any, Any], den: np.ndarray[Any, Any], confidence: float
) -> tuple[float | None, float | None]:
    if not den.sum():
        return None, None
    n_r, d_r = resampler.totals(num), resampler.totals(den)
    defined = d_r > 0
    samples = n_r[defined] / d_r[defined]
    if not samples.size:
        return None, None
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(samples, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _cases(records: Sequence[Record]) -> list[tuple[Record, Ablations]]:
    """The records the ablations ran on, each with its ablations."""
    return [(r, r.ablations) for r in records if is_case(r) and r.ablations is not None]


def summarise(
    records: Sequence[Record],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[AblationRow]:
    """Per reader: the gold restore's row, then one row per ablation. Empty when none ran.

    The bootstrap resamples the same question universe as the statistics pass
    (every question id in ``records``), so its draws are those of the run's seed.
    """
    cases = _cases(records)
    if not cases:
        return []
    universe = sorted({r.question_id for r in records})
    column = {q: i for i, q in enumerate(universe)}
    resampler = Resampler.draw(universe, resamples, seed)
    rows: list[AblationRow] = []
    for reader in sorted({r.reader for r, _a in cases}):
        mine = [(r, a) for r, a in cases if r.reader == reader]
        den = np.zeros(len(universe))
        for r, _a in mine:
            den[column[r.question_id]] += 1
        lo, hi = _resampled_interval(resampler, den, den, confidence)
        rows.append(
            AblationRow(
                reader,
                "gold",
                "gold restore, G_q (reference)",
                len(mine),
                len(mine),
                len(mine),
                0,
                0,
                1.0,
                lo,
                hi,
            )
        )
        for key, title in ABLATIONS:
            num = np.zeros(len(universe))
            den = np.zeros(len(universe))
            not_constructible = failed = 0
            for r, a in mine:
                verdict = a.verdict(key)
                reason = a.excluded.get(key)
                if verdict is None:
                    if reason is not None and reason.startswith(NOT_CONSTRUCTIBLE):
                        not_constructible += 1
                    else:
                        failed += 1
                    continue
                den[column[r.question_id]] += 1
                num[column[r.question_id]] += bool(verdict)
            scored, flipped = int(den.sum()), int(num.sum())
            lo, hi = _resampled_interval(resampler, num, den, confidence)
            note = ""
            if key == "surviving":
                none_left = [a for r, a in mine if r.gold_evicted == r.gold_units]
                flips = sum(bool(a.verdict(key)) for a in none_left)
                note = f"no gold survived in {len(none_left)} cases ({flips} of them flipped)"
            elif key == "store":
                tokens = [a.store_tokens for _r, a in mine if a.store_tokens is not None]
                if tokens:
                    note = f"mean injected {sum(tokens) / len(tokens):,.0f} tokens, up to {max(tokens):,}"
            elif key == "placebo":
                ratios = [
                    a.placebo_tokens / r.gold_tokens for r, a in mine if a.placebo_tokens is not None and r.gold_tokens
                ]
                if ratios:
                    note = f"placebo / gold tokens {min(ratios):.2f}-{max(ratios):.2f}"
            rows.append(
                AblationRow(
                    reader,
                    key,
                    title,
                    len(mine),
                    scored,
                    flipped,
                    not_constructible,
                    failed,
                    flipped / scored if scored else None,
                    lo,
                    hi,
                    note,
                )
            )
    return rows


def by_cell(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Per (reader, policy, budget): cases and the flips of each ablation (counts only)."""
    groups: dict[tuple[str, str, int], list[Ablations]] = {}
    for r, a in _cases(records):
        groups.setdefault((r.reader, r.policy, r.budget), []).append(a)
    rows = []
    # the records' canonical order: policy, loosest budget first, reader
    for (reader, policy, budget), mine in sorted(groups.items(), key=lambda g: (policy_order(g[0][1]), -g[0][2], g[0][0])):
        row: dict[str, Any] = {
            "reader": reader,
            "policy": policy,
            "budget": budget,
            "cases": len(mine),
        }
        for key, _title in ABLATIONS:
            row[key] = sum(a.verdict(key) is True for a in mine)
            row[f"{key}_scored"] = sum(a.verdict(key) is not None for a in mine)
        rows.append(row)
    return rows


def to_json(rows: Sequence[AblationRow], cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ablations section of ``hypotheses.json``."""
    return {
        "scope": "regime (b) irreversible records, every policy, budget and seed",
        "placebo_max_ratio": PLACEBO_MAX_RATIO,
        "pooled": [r.to_json() for r in rows],
        "cells": [dict(c) for c in cells],
    }
