"""The records behind the figures, for ``report.md``: one real case per bin and policy
(chosen by :func:`pytest_restore.stats.findings.bin_cases`), and the restore-tightness ablations.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_restore.audit.ablations import PLACEBO_MAX_RATIO
from pytest_restore.record import ABLATIONS, Record
from pytest_restore.report.inputs import md_text, short
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.results import budget_label


def render_ablations_md(analysis: Analysis) -> str:
    """The restore-tightness section of ``report.md``: pooled per reader, then the flips per cell (by reader)."""
    rows, confidence = analysis.ablations, analysis.settings.confidence
    cells = sorted(analysis.ablation_cells, key=lambda c: c["reader"])  # stable: each reader's in cell order
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
            share += f" ({short(r.ci_lo)}-{short(r.ci_hi)})"
        out.append(
            f"| {r.title} | {md_text(r.reader)} | {r.cases} | {r.scored} | {r.flipped} | {share} | "
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
            f"| {md_text(c['reader'])} | {md_text(c['policy'])} | {budget_label(c['budget'])} | {c['cases']} | "
            + " | ".join(f"{c[k]}/{c[f'{k}_scored']}" for k, _t in ABLATIONS)
            + " |"
        )
    out.append("")
    return "\n".join(out)


_CASE_TEXT = 300


def _case_text(value: str | None) -> str:
    if value is None:
        return "-"
    text = " ".join(value.split()).replace("|", "\\|")
    return text if len(text) <= _CASE_TEXT else text[: _CASE_TEXT - 1] + "…"


def _evicted_text(r: Record) -> str:
    evicted, total = r.gold_evicted, r.gold_units
    if not evicted:
        return f"none (all {total} gold units survived)"
    where = r.gold_evicted_where or ()
    units = r.gold_evicted_units or ()
    listed = "; ".join(
        f"unit {u}: {w}" for u, w in zip(units, where)
    ) or ", ".join(f"unit {u}" for u in units)
    return f"{evicted} of {total}" + (f": {listed}" if listed else "")


def render_cases_md(cases: Sequence[Record]) -> str:
    """One real case of each bin per policy (regime b), as the report shows them (``cases``: :func:`~pytest_restore.stats.findings.bin_cases`)."""
    out = [
        "## One case per bin (regime b)",
        "",
        (
            "For each policy and bin: the case at the loosest budget that has one, smallest question id "
            "first (then seed). Answers are shortened to 300 characters."
        ),
        "",
    ]
    if not cases:
        return "\n".join(out + ["No binned error.", ""])
    readers = {r.reader for r in cases}
    heading = None
    for r in cases:
        title = f"### {md_text(r.policy)}" + (f" (reader {md_text(r.reader)})" if len(readers) > 1 else "")
        if title != heading:
            out += [title, ""] if heading is None else ["", title, ""]
            heading = title
        out += [
            (
                f"- **{r.bin}** ({budget_label(r.budget)}, seed {r.seed}, question "
                f"`{r.question_id}`, {r.question_type}): {_case_text(r.question)}"
            ),
            f"  - reference: {_case_text(r.reference)}",
            f"  - policy answer: {_case_text(r.conditions.policy.answer)}",
            f"  - restored answer: {_case_text(r.conditions.restored.answer)}",
            f"  - gold evicted: {_evicted_text(r)}",
        ]
    return "\n".join(out) + "\n"
