"""report.md's sections of the numbers beside the bins: retrieval of the surviving gold, LoCoMo's answer metrics, cost.

Rendered from the :class:`~pytest_restore.stats.analysis.Analysis` alone
(each cell's ``retrieval`` and ``answers``, the recoverable shares and
``answers_by_type``); nothing is counted here.
"""

from __future__ import annotations

from pytest_restore.report.inputs import fmt, md_text, short
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.cost import CELL_CONDITIONS, CostFigures
from pytest_restore.stats.results import budget_label
from pytest_restore.stats.ties import TIE_SHARE

__all__ = [
    "render_answers_md", "render_cost_md", "render_importance_md", "render_retrieval_md", "share_ci",
]


def share_ci(point: float | None, lo: float | None, hi: float | None) -> str:
    """``0.62 (.55-.70)``; ``-`` when undefined."""
    if point is None:
        return "-"
    if lo is None or hi is None:
        return f"{point:.2f}"
    return f"{point:.2f} ({short(lo)}-{short(hi)})"


def render_retrieval_md(analysis: Analysis) -> str:
    """Per regime-(b) cell: the recoverable share beside how often the ranker found the surviving gold."""
    cells = [c for c in analysis.cells if c.regime == "b" and c.retrieval is not None]
    if not cells:
        return ""
    recoverable = {r.key: r for r in analysis.recoverable}
    k = max(c.retrieval.k for c in cells if c.retrieval is not None)
    out = [
        "## Retrieval of the surviving gold (regime b)",
        "",
        (
            f"Over each cell's records whose store kept some gold: the share whose top-{k} ranked list holds some "
            "(any) or all of the surviving gold, the same for what fit under the injection cap (what the reader "
            "saw), NDCG@k of the ranked list, and the mean best rank of the gold over the whole store; 95% question-cluster "
            "intervals. A recoverable error is the reader failing with the gold in reach: read the recoverable "
            "share beside recall at the cap (low recall: a retrieval miss; high recall: the reader missed it). "
            "No-evict keeps all the gold: its row is the ranker's ceiling."
        ),
        "",
        ("| policy | budget | reader | records | recoverable share | recall any@k | recall all@k | recall any@cap | "
        "recall all@cap | NDCG@k | gold rank |"),
        "|---|---|---|---:|---|---|---|---|---|---|---:|",
    ]
    for c in cells:
        found = c.retrieval
        assert found is not None
        rec = recoverable.get(c.key)
        shares = [share_ci(*found.shares[name]) for name in ("recall_any_k", "recall_all_k", "recall_any_cap", "recall_all_cap", "ndcg_k")]
        out.append(
            f"| {md_text(c.policy)} | {budget_label(c.budget)} | {md_text(c.reader)} | {found.records} | "
            f"{share_ci(rec.share, rec.lo, rec.hi) if rec else '-'} | {' | '.join(shares)} | {fmt(found.gold_rank, 1) or '-'} |"
        )
    return "\n".join(out) + "\n"


def render_answers_md(analysis: Analysis) -> str:
    """LoCoMo's token F1 and BLEU-1 of the answers per regime-(b) cell and per question type, each condition."""
    cells = [c for c in analysis.cells if c.regime == "b" and c.answers is not None and c.answers.scored]
    if not cells:  # records written before the answer metrics: nothing to show
        return ""
    out = [
        "## Answers beside the verdict: LoCoMo's F1 and BLEU-1 (regime b)",
        "",
        (
            "Mean token F1 by LoCoMo's rules (its normalisation, Porter stemming, per-category rules) and mean "
            "BLEU-1 of the reader's answers against the reference, per condition; excluded records left out. "
            "They describe the answers for comparison with published tables; the bins and tests are the judge's."
        ),
        "",
        "| policy | budget | reader | answers | F1 oracle | F1 policy | F1 restored | BLEU-1 oracle | BLEU-1 policy | BLEU-1 restored |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        assert c.answers is not None
        row = c.answers.row()
        shown = " | ".join(fmt(row[col], 3) or "-" for col in row)
        out.append(f"| {md_text(c.policy)} | {budget_label(c.budget)} | {md_text(c.reader)} | {c.answers.answers} | {shown} |")
    by_type = [(key, figures) for key, figures in analysis.answers_by_type if figures.scored]
    if by_type:
        out += [
            "",
            "By question type (every policy, budget and seed pooled):",
            "",
            "| reader | question type | answers | F1 oracle | F1 policy | F1 restored | BLEU-1 oracle | BLEU-1 policy | BLEU-1 restored |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for (reader, question_type), figures in by_type:
            row = figures.row()
            out.append(
                f"| {md_text(reader)} | {md_text(question_type)} | {figures.answers} | {' | '.join(fmt(row[col], 3) or '-' for col in row)} |"
            )
    return "\n".join(out) + "\n"


def render_importance_md(analysis: Analysis) -> str:
    """Each importance policy's score distribution over its questions' units (one row per policy and scorer),
    then how many units share their history's two top scores for each other policy deciding by a score."""
    if not analysis.importance and not analysis.ties:
        return ""
    out = _importance_rows(analysis) if analysis.importance else []
    if analysis.ties:
        out += [""] if out else []
        out += [
            "## Ties among scores",
            "",
            (
                "Policies that decide by a score of their own: the share of units at their history's two most common "
                f"scores (each question once). At {TIE_SHARE:.0%} or more, most evictions are ties, decided by "
                "another rule (said in the findings)."
            ),
            "",
            "| policy | questions | units | top two | mostly ties |",
            "|---|---:|---:|---:|---|",
        ]
        for t in analysis.ties:
            out.append(f"| {md_text(t.policy)} | {t.questions} | {t.units:,} | {t.top_share:.2f} | {'yes' if t.mostly_ties else 'no'} |")
    return "\n".join(out) + "\n"


def _importance_rows(analysis: Analysis) -> list[str]:
    """The importance scores section's lines."""
    out = [
        "## Importance scores",
        "",
        (
            "The share of units at each score (1-10) over the audited questions' histories (each question once). "
            f"When the two most common scores hold {TIE_SHARE:.0%} or more of the units, the policy's evictions are "
            "mostly ties broken oldest first (said in the findings)."
        ),
        "",
        "| policy | scorer | questions | units | " + " | ".join(str(s) for s in range(1, 11)) + " | top two | mostly ties |",
        "|---|---|---:|---:|" + "---:|" * 10 + "---:|---|",
    ]
    for d in analysis.importance:
        shares = " | ".join(f"{d.share(s):.2f}" for s in range(1, 11))
        out.append(
            f"| {md_text(d.policy)} | {md_text(d.scorer)} | {d.questions} | {d.units:,} | {shares} | {d.top_share:.2f} | "
            f"{'yes' if d.mostly_ties else 'no'} |"
        )
    return out


def _usd(value: float | None) -> str:
    """Dollars per answer, to a millionth of a dollar; ``unknown`` without a price."""
    return "unknown" if value is None else f"${value:.6f}"


def render_cost_md(cost: CostFigures | None) -> str:
    """What each answer cost: per condition and reader, then per regime-(b) cell (:mod:`pytest_restore.stats.cost`)."""
    if cost is None:
        return ""
    prices = "; ".join(
        f"{model} " + (f"${p[0]:g} in, ${p[1]:g} out" if p is not None else "unknown") for model, p in cost.prices
    ) or "none known"
    estimated = (
        f" {cost.estimated:,} of the {cost.answers:,} answers counted have estimated tokens: a model reported no "
        "usage, so its input is counted as the request's o200k tokens (with the chat format's overhead) and its "
        "output as the reply's."
        if cost.estimated
        else " Every answer's tokens are as the models reported them."
    )
    out = [
        "## Cost per question",
        "",
        (
            "What one answer costs: the reader's call that wrote it plus the judge's call that graded it, mean "
            "tokens in and out per answer and their price in USD (per million tokens: " + prices + "). The oracle "
            "counts each question once; the policy and restored conditions every regime-(b) record. An answer's "
            "cost is counted whether or not the run shared its call with another condition: the run's bill is the "
            "model usage, lower where calls were shared." + estimated
        ),
        "",
        "| reader | condition | answers | tokens in | tokens out | USD per question | estimated |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (reader, condition), c in cost.by_condition:
        out.append(
            f"| {md_text(reader)} | {condition} | {c.answers:,} | {c.tokens_in:,.0f} | {c.tokens_out:,.0f} | {_usd(c.usd)} | "
            f"{c.estimated:,} |"
        )
    memory = [cell.memory for cell in cost.cells if cell.memory is not None]
    out += [
        "",
        (
            "Per regime-(b) cell. The last column is one figure per question: what answering a question under "
            "the policy costs, its policy answer (reader and judge)"
            + (" plus its memory share" if memory else "")
            + "; the restored answers and the oracle's are the audit's own calls and are not in it."
        ),
        "",
    ]
    if memory:
        estimated_memory = sum(m.estimated for m in memory)
        out += [
            (
                "The memory columns are what the policy's own model calls (the importance scorer's, a memory system's "
                "writer's) cost per "
                "question to build its store: a store serves every question of its history, so each call is split "
                "over the questions whose history it served, and a cell's shares add up to the calls that built "
                "its stores once."
                + (
                    f" {estimated_memory:,} of the {sum(m.answers for m in memory):,} records' memory shares are "
                    "estimated (a model reported no usage)."
                    if estimated_memory
                    else ""
                )
            ),
            "",
        ]
    header = (
        "| policy | budget | reader | answers | policy tokens in | policy tokens out | policy USD | "
        "restored tokens in | restored tokens out | restored USD |"
    )
    rule = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    if memory:
        header += " memory tokens in | memory tokens out | memory USD |"
        rule += "---:|---:|---:|"
    out += [header + " USD per question |", rule + "---:|"]
    several = len({cell.ranker for cell in cost.cells}) > 1
    for cell in cost.cells:
        found = dict(cell.conditions)
        shown = []
        for name in CELL_CONDITIONS:
            one = found.get(name)
            shown += ["-"] * 3 if one is None else [f"{one.tokens_in:,.0f}", f"{one.tokens_out:,.0f}", _usd(one.usd)]
        if memory:  # a share of a call per question: a tenth of a token shows
            m = cell.memory
            shown += ["-"] * 3 if m is None else [f"{m.tokens_in:,.1f}", f"{m.tokens_out:,.1f}", _usd(m.usd)]
        total = cell.total
        shown.append("-" if total is None else _usd(total.usd))
        answers = max(c.answers for c in found.values())
        ranker = f" ({md_text(cell.ranker)})" if several else ""
        out.append(
            f"| {md_text(cell.policy)}{ranker} | {budget_label(cell.budget)} | {md_text(cell.reader)} | {answers:,} | {' | '.join(shown)} |"
        )
    return "\n".join(out) + "\n"
