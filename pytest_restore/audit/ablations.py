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
seeds of ``random``); the paper used seed 0 of the same records. A record
carries ``ablation_surviving_correct``, ``ablation_store_correct`` and
``ablation_placebo_correct`` (true, false or null), ``ablation_excluded``
(``{}`` when the ablations ran, a reason per ablation that could not be
scored, null when they did not run), the injected tokens of (ii) and the
placebo's units and tokens. Every other record holds nulls.

The report's figure per ablation is the flip share: cases that came out
correct over cases scored, with a question-cluster bootstrap interval (the
statistics pass's resampling, seed and resample count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_restore.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Resampler,
)
from pytest_restore.data.units import History
from pytest_restore.record import ABLATIONS

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


def ran(record: Mapping[str, Any]) -> bool:
    """Whether the ablations ran on this record."""
    return record.get("ablation_excluded") is not None


def is_case(record: Mapping[str, Any]) -> bool:
    """A regime-(b) irreversible record (what the ablations run on)."""
    return (
        record.get("regime") == "b"
        and record.get("bin") == "irreversible"
        and record.get("excluded") is None
    )


# -- summaries -------------------------------------------------------------------


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


def _interval(
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


def summarise(
    records: Sequence[Mapping[str, Any]],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[AblationRow]:
    """Per reader: the gold restore's row, then one row per ablation. Empty when none ran.

    The bootstrap resamples the same question universe as the statistics pass
    (every question id in ``records``), so its draws are those of the run's seed.
    """
    cases = [r for r in records if is_case(r) and ran(r)]
    if not cases:
        return []
    universe = sorted({str(r["question_id"]) for r in records})
    column = {q: i for i, q in enumerate(universe)}
    resampler = Resampler.draw(universe, resamples, seed)
    rows: list[AblationRow] = []
    for reader in sorted({str(r["reader"]) for r in cases}):
        mine = [r for r in cases if str(r["reader"]) == reader]
        den = np.zeros(len(universe))
        for r in mine:
            den[column[str(r["question_id"])]] += 1
        lo, hi = _interval(resampler, den, den, confidence)
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
        for key, title, field in ABLATIONS:
            num = np.zeros(len(universe))
            den = np.zeros(len(universe))
            not_constructible = failed = 0
            for r in mine:
                verdict = r.get(field)
                reason = (r.get("ablation_excluded") or {}).get(key)
                if verdict is None:
                    if reason is not None and str(reason).startswith(NOT_CONSTRUCTIBLE):
                        not_constructible += 1
                    else:
                        failed += 1
                    continue
                den[column[str(r["question_id"])]] += 1
                num[column[str(r["question_id"])]] += bool(verdict)
            scored, flipped = int(den.sum()), int(num.sum())
            lo, hi = _interval(resampler, num, den, confidence)
            note = ""
            if key == "surviving":
                none_left = [r for r in mine if int(r["gold_evicted"]) == int(r["gold_units"])]
                flips = sum(bool(r.get(field)) for r in none_left)
                note = f"no gold survived in {len(none_left)} cases ({flips} of them flipped)"
            elif key == "store":
                tokens = [
                    int(r["ablation_store_tokens"])
                    for r in mine
                    if r.get("ablation_store_tokens") is not None
                ]
                if tokens:
                    note = f"mean injected {sum(tokens) / len(tokens):,.0f} tokens, up to {max(tokens):,}"
            elif key == "placebo":
                ratios = [
                    int(r["ablation_placebo_tokens"]) / int(r["gold_tokens"])
                    for r in mine
                    if r.get("ablation_placebo_tokens") is not None and r.get("gold_tokens")
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


def by_cell(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (reader, policy, budget): cases and the flips of each ablation (counts only)."""
    groups: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for r in records:
        if is_case(r) and ran(r):
            groups.setdefault((str(r["reader"]), str(r["policy"]), int(r["budget"])), []).append(r)
    rows = []
    for (reader, policy, budget), mine in groups.items():
        row: dict[str, Any] = {
            "reader": reader,
            "policy": policy,
            "budget": budget,
            "cases": len(mine),
        }
        for key, _title, field in ABLATIONS:
            row[key] = sum(r.get(field) is True for r in mine)
            row[f"{key}_scored"] = sum(r.get(field) is not None for r in mine)
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


def _short(value: float) -> str:
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def render_md(
    rows: Sequence[AblationRow],
    cells: Sequence[Mapping[str, Any]],
    *,
    label: Any = str,
    confidence: float = DEFAULT_CONFIDENCE,
) -> str:
    """The ablations section of ``report.md``."""
    out = ["## Restore-tightness ablations (regime b irreversible cases)", ""]
    if not rows:
        out += ["Not run (pass `--restore-ablations`).", ""]
        return "\n".join(out)
    out += [
        (
            "Each ablation re-answers the irreversible cases of regime (b) (every policy, budget and seed) "
            "with one change to the restored context: (i) only the gold that survived eviction, ranked over "
            "S_P (this is regime (a)'s context); (ii) the whole retained store forced in, no cap; (iii) a "
            f"non-gold placebo, the units nearest the gold whose total is within {PLACEBO_MAX_RATIO:g}x "
            "the gold's tokens, forced in the gold's place. Share = flipped / scored, with its "
            f"{confidence:.0%} question-cluster bootstrap interval. The gold restore flips every case by definition."
        ),
        "",
        "| condition | reader | cases | scored | flipped | share (95% CI) | not constructible | failed | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        share = "-" if r.share is None else f"{r.share:.3f}"
        if r.share is not None and r.ci_lo is not None and r.ci_hi is not None:
            share += f" ({_short(r.ci_lo)}-{_short(r.ci_hi)})"
        out.append(
            f"| {r.title} | {r.reader} | {r.cases} | {r.scored} | {r.flipped} | {share} | "
            f"{r.not_constructible} | {r.failed} | {r.note} |"
        )
    out += [
        "",
        "Flips per cell:",
        "",
        "| reader | policy | budget | cases | (i) surviving | (ii) store | (iii) placebo |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for c in cells:
        out.append(
            f"| {c['reader']} | {c['policy']} | {label(c['budget'])} | {c['cases']} | "
            + " | ".join(f"{c[k]}/{c[f'{k}_scored']}" for k, _t, _f in ABLATIONS)
            + " |"
        )
    out.append("")
    return "\n".join(out)
