"""The report's word on rankers compared in one run (``--restore-rankers``): a findings line and a section.

Formatting only: the figures, tests and orders come from the analysis
(:mod:`pytest_restore.stats.rankers`). A run of one ranker gets neither.
"""

from __future__ import annotations

from pytest_restore.report.inputs import md_text
from pytest_restore.report.numbers import share_ci
from pytest_restore.stats.findings import Findings
from pytest_restore.stats.rankers import RankerRow
from pytest_restore.stats.results import budget_label

_share = share_ci


def _diff(row: RankerRow, figure: str) -> str:
    test = row.tests.get(figure)
    if test is None or test.statistic is None:
        return "-" if row.cell.ranker else "baseline"
    ci = "" if test.ci_lo is None or test.ci_hi is None else f" ({test.ci_lo:+.2f} to {test.ci_hi:+.2f})"
    p = "" if test.p_holm is None else f", Holm p {test.p_holm:.3f}"
    return f"{test.statistic:+.2f}{ci}{p}"


def rankers_findings(findings: Findings) -> list[str]:
    """The first finding of a run that compares rankers: how the recoverable share at the loosest budget moves."""
    rows = findings.ranker_rows
    if not rows:
        return []
    analysis = findings.analysis
    st = analysis.settings
    out = []
    for reader in sorted({r.reader for r in rows}):
        mine = [r for r in rows if r.reader == reader]
        loose = max(r.budget for r in mine)
        parts = []
        for policy in dict.fromkeys(r.policy for r in mine if r.budget == loose and r.policy not in (st.reference, st.control)):
            cells = [r for r in mine if (r.policy, r.budget) == (policy, loose)]
            shown = []
            for r in cells:
                share = r.recoverable
                text = f"{_share(share.share, share.lo, share.hi) if share else '-'} {md_text(r.ranker)}"
                test = r.tests.get("recoverable share")
                if test is not None and test.statistic is not None:
                    ci = "" if test.ci_lo is None or test.ci_hi is None else f", CI {test.ci_lo:+.2f} to {test.ci_hi:+.2f}"
                    text += f" ({test.statistic:+.2f}{ci}, Holm {test.decision})"
                shown.append(text)
            parts.append(f"{policy}: " + ", ".join(shown))
        changed = [o for o in findings.orderings if o.reader == reader and o.budget == loose]
        order = (
            " The policies' order by recoverable share "
            + ("changes with the ranker." if changed and changed[0].changes else "is the same under every ranker.")
            if changed
            else ""
        )
        tag = f" (reader {reader})" if len({r.reader for r in rows}) > 1 else ""
        out.append(
            f"- **Rankers{tag}.** At {budget_label(loose)}, the recoverable share of the errors (rec / err, regime b; "
            f"95% CI) under each ranker, with the paired difference from the baseline {analysis.baseline_ranker}: "
            + "; ".join(parts) + "." + order
        )
    return out


def render_rankers_md(findings: Findings) -> str:
    """The "Rankers compared" section: per policy x budget, each ranker's shares and its differences from the baseline."""
    rows = findings.ranker_rows
    if not rows:
        return ""
    analysis = findings.analysis
    out = [
        "## Rankers compared (regime b)",
        "",
        (
            f"The same questions, policies and stores read by each ranker; the baseline is "
            f"{analysis.baseline_ranker} (the other tables of this report are its). Recoverable share = rec / err, "
            "two-bin share = irr / (irr + rec), each with its 95% question-cluster bootstrap interval; the "
            "difference from the baseline is paired by question (one resample matrix), Holm within the "
            "rankers family. Recall any@cap (some surviving gold in the reader's context) and NDCG@k of the "
            "ranked list say why the recoverable share moves: see the retrieval section."
        ),
        "",
        ("| policy | budget | ranker | N | err | irr | rec | recoverable share | difference | two-bin share | difference "
        "| recall any@cap | NDCG@k |"),
        "|---|---|---|---:|---:|---:|---:|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r.cell
        share = r.recoverable
        out.append(
            f"| {md_text(r.policy)} | {budget_label(r.budget)} | {md_text(r.ranker)} | {c.N} | {c.err} | {c.irr} | {c.rec} | "
            f"{_share(share.share, share.lo, share.hi) if share else '-'} | {_diff(r, 'recoverable share')} | "
            f"{_share(c.two_bin_share, c.two_bin_lo, c.two_bin_hi)} | {_diff(r, 'two-bin share')} | "
            f"{share_ci(*c.retrieval.shares['recall_any_cap']) if c.retrieval else '-'} | "
            f"{share_ci(*c.retrieval.shares['ndcg_k']) if c.retrieval else '-'} |"
        )
    out += ["", "Policies by recoverable share, highest first:", ""]
    for o in findings.orderings:
        lines = "; ".join(f"{ranker}: {' > '.join(order)}" for ranker, order in o.by_ranker.items())
        verdict = "changes" if o.changes else "same order"
        out.append(f"- {budget_label(o.budget)} ({md_text(o.reader)}): {verdict}. {lines}")
    return "\n".join(out) + "\n"
