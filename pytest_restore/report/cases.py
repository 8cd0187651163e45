"""The records behind the figures, for ``report.md``: one real case per bin and policy,
and the restore-tightness ablations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_restore.audit import ablations
from pytest_restore.record import BINS, Record
from pytest_restore.report.inputs import ablation_rows
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.results import budget_label, policy_order


def render_ablations_md(records: Sequence[Record], analysis: Analysis) -> str:
    """The restore-tightness section of ``report.md``."""
    cells = sorted(
        ablations.by_cell(records),
        key=lambda c: (c["reader"], policy_order(c["policy"]), -c["budget"]),
    )
    return ablations.render_md(
        ablation_rows(records, analysis), cells, label=budget_label, confidence=analysis.settings.confidence
    )


_CASE_TEXT = 300


def bin_cases(records: Sequence[Record]) -> list[Record]:
    """One regime-(b) record per reader, policy and bin, chosen deterministically.

    The loosest budget at which the policy has a case of that bin, then the
    smallest question id, then the smallest seed.
    """
    chosen: dict[tuple[str, str, str], Record] = {}
    for r in records:
        if r["regime"] != "b" or r["bin"] is None:
            continue
        key = (str(r["reader"]), str(r["policy"]), str(r["bin"]))
        best = chosen.get(key)
        rank = (-int(r["budget"]), str(r["question_id"]), int(r["seed"]))
        if best is None or rank < (-int(best["budget"]), str(best["question_id"]), int(best["seed"])):
            chosen[key] = r
    return [
        chosen[k]
        for k in sorted(chosen, key=lambda k: (k[0], policy_order(k[1]), BINS.index(k[2])))
    ]


def _case_text(value: Any) -> str:
    if value is None:
        return "-"
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text if len(text) <= _CASE_TEXT else text[: _CASE_TEXT - 1] + "…"


def _evicted_text(r: Mapping[str, Any]) -> str:
    evicted, total = r.get("gold_evicted"), r.get("gold_units")
    if not evicted:
        return f"none (all {total} gold units survived)"
    where = r.get("gold_evicted_where") or []
    units = r.get("gold_evicted_units") or []
    listed = "; ".join(
        f"unit {u}: {w}" for u, w in zip(units, where)
    ) or ", ".join(f"unit {u}" for u in units)
    return f"{evicted} of {total}" + (f": {listed}" if listed else "")


def render_cases_md(records: Sequence[Record]) -> str:
    """One real case of each bin per policy (regime b), as the report shows them."""
    out = [
        "## One case per bin (regime b)",
        "",
        (
            "For each policy and bin: the case at the loosest budget that has one, smallest question id "
            "first (then seed). Answers are shortened to 300 characters."
        ),
        "",
    ]
    cases = bin_cases(records)
    if not cases:
        return "\n".join(out + ["No binned error.", ""])
    readers = {str(r["reader"]) for r in cases}
    heading = None
    for r in cases:
        title = f"### {r['policy']}" + (f" (reader {r['reader']})" if len(readers) > 1 else "")
        if title != heading:
            out += [title, ""] if heading is None else ["", title, ""]
            heading = title
        out += [
            (
                f"- **{r['bin']}** ({budget_label(int(r['budget']))}, seed {r['seed']}, question "
                f"`{r['question_id']}`, {r['question_type']}): {_case_text(r.get('question'))}"
            ),
            f"  - reference: {_case_text(r.get('reference'))}",
            f"  - policy answer: {_case_text(r.get('policy_answer'))}",
            f"  - restored answer: {_case_text(r.get('restored_answer'))}",
            f"  - gold evicted: {_evicted_text(r)}",
        ]
    return "\n".join(out) + "\n"
