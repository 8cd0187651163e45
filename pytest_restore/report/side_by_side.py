"""``report.md``'s section on the memory libraries beside the built-in policies: one row per policy and budget.

The rows (:class:`~pytest_restore.stats.side_by_side.SideRow`) are made once per report, before
anything renders (:func:`pytest_restore.stats.side_by_side.side_by_side`); this module formats them.
A run without a library gets no section.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_restore.report.inputs import fmt, md_text
from pytest_restore.report.numbers import share_ci
from pytest_restore.stats.results import budget_label
from pytest_restore.stats.side_by_side import SideRow


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.6f}"


def _per_turn(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_side_by_side_md(rows: Sequence[SideRow]) -> str:
    """``report.md``'s section comparing the run's memory libraries with its other policies ("" without a library)."""
    if not rows:
        return ""
    several = len({row.reader for row in rows}) > 1
    out = [
        "## Memory libraries side by side (regime b)",
        "",
        (
            "Each policy and budget on one row: the bins and the two-bin share with its 95% question-cluster interval; "
            "the distortion share dis / (irr + rec + dis) with its interval and the destruction share (irr + dis) / (irr + rec + dis); "
            "what the store a question was read from held (the mean over the cell's questions: memories for a memory "
            "system, turns for a store of raw turns, and their tokens); the policy's own model calls per turn it was "
            "fed (chat calls, then embeddings requests), the seconds a library took to make and feed its stores per "
            "turn, and what its own calls cost per question (its chat calls through the run's gateway at the writer "
            "model's price and its embeddings at the embedder's, each store's split over the questions of its history); "
            "and the library's version."
        ),
        "",
        (
            "| policy | budget |" + (" reader |" if several else "") + " N | irr | rec | dis | res | two-bin (95% CI) | "
            "dis share (95% CI) | destruction | memories held | tokens held | calls / turn | embeddings / turn | ingest s / turn "
            "| own calls USD / question | version |"
        ),
        "|---|---|" + ("---|" if several else "") + "---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    estimated = False
    for row in rows:
        estimated = estimated or row.memory_estimated
        reader = f" {md_text(row.reader)} |" if several else ""
        out.append(
            f"| {md_text(row.policy)} | {budget_label(row.budget)} |{reader} {row.N} | {row.irr} | {row.rec} | {row.dis} | "
            f"{row.res} | {share_ci(row.two_bin_share, row.two_bin_lo, row.two_bin_hi)} | {share_ci(row.dis_share, row.dis_lo, row.dis_hi)} | "
            f"{fmt(row.destruction_share, 2) or '-'} | {_per_turn(row.memories_held, 1)} | {_per_turn(row.tokens_held, 0)} | "
            f"{_per_turn(row.calls_per_turn)} | {_per_turn(row.embeddings_per_turn)} | {_per_turn(row.ingest_s_per_turn, 3)} | "
            f"{_usd(row.memory_usd_per_question)}{'*' if row.memory_estimated else ''} | {md_text(row.library) or '-'} |"
        )
    if estimated:
        out += ["", "\\* some of these calls' tokens are estimated: the model reported no usage."]
    out += [
        "",
        (
            "Ingest seconds are wall time on the machine that ran the cell (its load included) and differ between "
            "runs; every other figure is a function of the records and the memory systems' counts."
        ),
    ]
    return "\n".join(out) + "\n"
