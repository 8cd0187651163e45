"""``report.md``: the findings first, then the per-cell tables of both regimes, the
hypothesis families, the H2 pairs, the bins by question type, the model calls,
the run's settings and exclusions; and the session verdict's lines in words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_restore.audit.memo import ReaderCalls
from pytest_restore.report.cases import render_ablations_md, render_cases_md
from pytest_restore.report.inputs import (
    RunInfo,
    fmt,
    interval,
    md_text,
    num,
    short,
)
from pytest_restore.report.numbers import (
    render_answers_md,
    render_cost_md,
    render_importance_md,
    render_retrieval_md,
    share_ci,
)
from pytest_restore.report.rankers import rankers_findings, render_rankers_md
from pytest_restore.report.side_by_side import render_side_by_side_md
from pytest_restore.report.simulated import simulated_reader_md
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.families import POWER
from pytest_restore.stats.findings import Findings, ReaderFindings, budget_list
from pytest_restore.stats.results import HypothesisTest, budget_label
from pytest_restore.stats.ties import TIE_SHARE

if TYPE_CHECKING:  # the model imports the renderers' row types; the renderers read the model
    from pytest_restore.report.model import ReportModel

_share_with_interval = share_ci


def render_cell_table(analysis: Analysis, regime: str) -> str:
    """The per-cell table of one regime, in the paper's Table 1 layout (markdown).

    Regime (a) leaves out ``rec`` and the two-bin share, constant by construction.
    """
    full = regime != "a"
    if full:
        header = (
            "| policy | budget | reader | N | err | irr | rec | dis | res | two-bin (95% CI) | destruction "
            "| irr-rate | accuracy | gold evicted |"
        )
        rule = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    else:
        header = "| policy | budget | reader | N | err | irr | dis | res | irr-rate | accuracy | gold evicted |"
        rule = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    lines = [header, rule]
    previous = None
    for cell in analysis.cells:
        if cell.regime != regime:
            continue
        two_bin = _share_with_interval(cell.two_bin_share, cell.two_bin_lo, cell.two_bin_hi)
        name = md_text(cell.policy) if cell.policy != previous else ""
        previous = cell.policy
        middle = (
            f"{cell.rec} | {cell.dis} | {cell.res} | {two_bin} | {fmt(cell.destruction_share, 2) or '-'}"
            if full
            else f"{cell.dis} | {cell.res}"
        )
        lines.append(
            f"| {name} | {budget_label(cell.budget)} | {md_text(cell.reader)} | {cell.N} | {cell.err} | {cell.irr} | {middle} | "
            f"{fmt(cell.irr_rate, 2) or '-'} | {fmt(cell.accuracy, 2) or '-'} | {fmt(cell.gold_evicted_rate, 2) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def _expectation(test: HypothesisTest) -> str:
    if not test.testable:
        return f"not testable at this N ({test.power_note})"
    text = {True: "met", False: "**not met**", None: "-"}[test.expectation_met]
    return f"{text} ({test.note})" if test.note else text


def render_family_table(tests: Sequence[HypothesisTest]) -> str:
    """One family's tests as a markdown table."""
    lines = [
        "| test | reader | n | statistic | interval | p raw | p Holm | decision | expectation |",
        "|---|---|---:|---:|---|---:|---:|---|---|",
    ]
    for t in tests:
        lines.append(
            f"| {md_text(t.name)} | {md_text(t.reader)} | {t.n_questions} | {num(t.statistic)} | {interval(t.ci_lo, t.ci_hi)} | "
            f"{num(t.p_raw, 4)} | {num(t.p_holm, 4)} | {t.decision} | {_expectation(t)} |"
        )
    if not tests:
        lines.append("| (no test: the grid holds none of this family's cells) | | | | | | | | |")
    return "\n".join(lines) + "\n"


def render_hypotheses_md(findings: Findings) -> str:
    """The hypothesis-family sections of ``report.md``, one per declared family the report shows."""
    analysis = findings.analysis
    s = analysis.settings
    out = [
        "## Hypothesis tests",
        "",
        (
            f"Question-cluster bootstrap: {s.resamples} resamples of the {analysis.questions} question ids "
            f"(seed {s.seed}), all seeds of a question moving together; {s.confidence:.0%} percentile "
            f"intervals (TOST: {1 - 2 * s.alpha:.0%}); smoothed p-values; Holm-Bonferroni within each "
            f"family and reader; alpha {s.alpha:g}; caliper {s.caliper:g}; equivalence margin "
            f"{s.equivalence_margin:g}. An unmet expectation fails the run only where the run could have "
            f"met it ({POWER:.0%} power at Holm's strictest level for the effect the family is about)."
        ),
        "",
        "| family | reader | tests | empty | rejected | expectation not met | not testable at this N |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in findings.summary:
        out.append(
            f"| {row.family} | {md_text(row.reader)} | {row.tests} | {row.empty} | {row.rejected} | "
            f"{row.expectation_unmet} | {row.not_testable} |"
        )
    failures = findings.failures
    out += ["", "Expectations not met (each fails the session):" if failures else "Every testable expectation is met.", ""]
    if failures:
        out += [f"- {line}" for line in failures] + [""]
    untestable = findings.untestable
    if untestable:
        out += ["Not testable at this N (reported, not failed):", ""] + [f"- {line}" for line in untestable] + [""]
    for family, tests in findings.families:
        out += [f"### {family.title}", "", family.tests, "", render_family_table(tests)]
    return "\n".join(out)


def render_decisions_md(analysis: Analysis) -> str:
    """Every hypothesis test's decision and expectation, one row each (what a user's snapshot pins)."""
    lines = ["| family | test | reader | decision | expectation |", "|---|---|---|---|---|"]
    for t in analysis.tests:
        lines.append(f"| {t.family} | {md_text(t.name)} | {md_text(t.reader)} | {t.decision} | {_expectation(t)} |")
    return "\n".join(lines) + "\n"


def render_pairs_md(findings: Findings) -> str:
    """The H2 pairs table: every candidate pair, matched or not and why, with the resolution."""
    analysis = findings.analysis
    resolution = {(t.reader, t.budget, t.policy, t.other): t.half_width for t in findings.h2}
    out = [
        "## H2 pairs: accuracy matching (regime b)",
        "",
        (
            f"Every pair of policies at a budget (the control and the reference excluded) is matched when "
            f"their accuracies differ by at most the caliper {analysis.settings.caliper:g}. The resolution "
            "of a matched pair is the half-width of its H2 interval."
        ),
        "",
        (
            "| reader | budget | pair | accuracy | accuracy (other) | gap | matched | why "
            "| irr-rate difference | resolution |"
        ),
        "|---|---|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for m in analysis.matching:
        half = resolution.get((m.reader, m.budget, m.policy, m.other))
        out.append(
            f"| {md_text(m.reader)} | {budget_label(m.budget)} | {md_text(m.policy)} vs {md_text(m.other)} | "
            f"{num(m.accuracy)} | "
            f"{num(m.other_accuracy)} | {num(m.gap)} | {'yes' if m.matched else 'no'} | {m.reason} | "
            f"{num(m.irr_rate_difference)} | {'±' + num(half) if half is not None else '-'} |"
        )
    if not analysis.matching:
        out.append("| (no candidate pair) | | | | | | | | | |")
    return "\n".join(out) + "\n"


def render_bins_by_type_md(analysis: Analysis) -> str:
    """The breakdown of the bins by question type (every policy, budget and seed pooled)."""
    out = [
        "## Bins by question type",
        "",
        (
            "Oracle-answerable records of every policy, budget and seed, pooled per reader, regime and "
            "question type; shares are of the errors."
        ),
        "",
        (
            "| reader | regime | question type | N | err | irr | rec | dis | res | irr share | rec share "
            "| dis share | res share | two-bin |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in analysis.by_type:
        out.append(
            f"| {md_text(row.reader)} | {row.regime} | {md_text(row.question_type)} | {row.N} | {row.err} | "
            f"{row.irr} | {row.rec} | {row.dis} | {row.res} | {num(row.irr_share, 2)} | "
            f"{num(row.rec_share, 2)} | {num(row.dis_share, 2)} | {num(row.res_share, 2)} | "
            f"{num(row.two_bin_share, 2)} |"
        )
    return "\n".join(out) + "\n"


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f" (95% CI {short(lo)}-{short(hi)})"


def _distortion_line(reader: ReaderFindings, tag: str) -> list[str]:
    """The findings line on memory systems holding derived memories: how much of each one's loss is distortion.

    Per system and budget, under top-k retrieval: distorted errors as a share of those a restore fixes,
    dis / (irr + rec + dis), and the destruction share, (irr + dis) / (irr + rec + dis).
    """
    parts = []
    for policy, cells in reader.distortion:
        shown = [
            f"{budget_label(c.budget)} {c.share:.2f} ({c.dis} of {c.fixed}; destruction {fmt(c.destruction_share, 2)})"
            if c.share is not None
            else f"{budget_label(c.budget)} no restorable error"
            for c in cells
        ]
        parts.append(f"{md_text(policy)} " + ", ".join(shown))
    if not parts:
        return []
    return [
        f"- **Distortion{tag}.** Of the errors a restore fixes under top-k retrieval, the share a memory "
        "system kept a trace of (every gold turn cited by a held memory) without the answer, "
        "dis / (irr + rec + dis), with the destruction share (irr + dis) / (irr + rec + dis): "
        + "; ".join(parts)
        + "."
    ]


def _h2_resolution(reader: ReaderFindings, idle: frozenset[int]) -> str:
    """The H2 pairs' resolution, in words that hold when an interval is empty or a budget evicts nothing.

    A pair whose questions all score alike on both sides has an interval of
    width 0: there is nothing to resolve, so it is counted, not shown as a
    resolution of ±0.000. A pair at a budget that binds for no history compares
    a store with itself.
    """
    halves, alike = reader.h2_halves, reader.h2_alike
    text = f" at a resolution of ±{halves[0]:.3f} to ±{halves[1]:.3f}" if halves else ""
    if alike:
        text += (
            f"; {alike} {'pair scores' if alike == 1 else 'pairs score'} every question alike on "
            "both sides (no irr / N difference to resolve)"
        )
    if reader.h2_idle:
        text += (
            f"; {reader.h2_idle} at budgets that evict nothing ({budget_list(idle)}), where both sides "
            "are the same store"
        )
    return text


def _control_text(reader: ReaderFindings) -> str:
    if not reader.control:
        return " The run has no positive control."
    diffs = reader.control_diffs
    return (
        f" The positive control is detected in {reader.detected} of {reader.control} contrasts"
        + (f" (irr-rate difference {diffs[0]:+.2f} to {diffs[1]:+.2f})" if diffs else "")
        + (f"; {reader.control_untested} not testable at this N" if reader.control_untested else "")
        + (
            f"; {reader.control_idle} at budgets that evict nothing, so the control evicts no gold there"
            if reader.control_idle
            else ""
        )
        + "."
    )


def _ties_lines(analysis: Analysis) -> list[str]:
    """A finding per policy whose decisions are mostly ties (the rule of :mod:`pytest_restore.stats.ties`)."""
    out = []
    for t in analysis.ties:
        if t.mostly_ties:
            out.append(
                f"- **Ties.** {md_text(t.policy)}: {t.top_share:.0%} of the {t.units:,} units hold their history's two most "
                f"common scores, at least the {TIE_SHARE:.0%} that makes its decisions mostly ties: among equal "
                "scores another rule decides (the built-in policies: the older unit first), so its cells measure that "
                "rule more than the policy's score."
            )
    for d in analysis.importance:
        if not d.mostly_ties:
            continue
        top = ", ".join(f"{s}: {d.share(s):.0%}" for s in d.top)
        out.append(
            f"- **Ties.** {md_text(d.policy)} (scorer {md_text(d.scorer)}): two scores hold {d.top_share:.0%} of the {d.units:,} units "
            f"({top}), at least the {TIE_SHARE:.0%} that makes its decisions mostly ties: it evicts oldest first "
            "among equal scores, so its cells measure FIFO within a score more than the scorer's judgement."
        )
    return out


def _reader_findings(reader: ReaderFindings, tag: str, idle: frozenset[int]) -> list[str]:
    """One reader's lines: destruction (R1), distortion, the regimes (H3), matched accuracy (H2, control)."""
    parts = []
    for d in reader.destruction:
        if d.share is None:
            parts.append(f"{md_text(d.policy)} no restorable error")
            continue
        verdict = "a majority" if d.majority else "not shown a majority"
        parts.append(f"{md_text(d.policy)} {d.share:.2f}{_ci(d.lo, d.hi)}, {verdict}")
    out = [
        f"- **Destruction{tag}.** At {budget_label(reader.loose)} under top-k retrieval, irreversible errors as a "
        "share of those a restore fixes, irr / (irr + rec) (a majority where the lower bound clears "
        "0.5): " + ("; ".join(parts) if parts else "no evicting policy in the run") + "."
    ]
    out += _distortion_line(reader, tag)
    moved = reader.h3_moved
    shown = ", ".join(
        f"{md_text(t.policy)} {budget_label(t.budget)} {t.statistic:+.2f}{_ci(t.ci_lo, t.ci_hi)}"
        for t in moved[:4]
        if t.statistic is not None
    )
    out.append(
        f"- **Regimes{tag}.** The recoverable share differs between top-k retrieval (b) and forced gold (a) "
        f"in {len(moved)} of {len(reader.h3)} cells (H3, Holm)"
        + (f": {shown}" + (" ..." if len(moved) > 4 else "") if moved else "")
        + (
            f"; regime (a) holds recoverable errors in {reader.h3_violations} cells (construct violation)."
            if reader.h3_violations
            else "; regime (a) holds no recoverable error, as it must."
        )
    )
    split = reader.h2_split
    out.append(
        f"- **Matched accuracy{tag}.** {reader.matched} of {reader.pairs} policy pairs are accuracy-matched; "
        + (
            f"{len(split)} {'dissociates' if len(split) == 1 else 'dissociate'} on irr / N (H2, Holm)"
            + (": " + ", ".join(f"{md_text(t.policy)} vs {md_text(str(t.other))} {budget_label(t.budget)}" for t in split) if split else "")
            + _h2_resolution(reader, idle)
            + "."
            if reader.h2
            else "no pair to test."
        )
        + _control_text(reader)
    )
    return out


def render_findings_md(findings: Findings, rankers_lead: Sequence[str] | None = None) -> str:
    """The answer first: the paper's findings for this run, in words, with their intervals.

    In the paper's order: destruction's share at the loosest budget per policy
    and whether its lower bound clears 0.5 (R1); where the two regimes differ
    (H3); whether an accuracy-matched pair dissociates, with the positive
    control's resolution (H2, TOST, positive control); then the expectations.
    Contrasts at a budget that binds for no history (``findings.idle``) compare
    a store with itself, and the findings say so. ``rankers_lead``: the rankers'
    findings line when the caller has it (:func:`~pytest_restore.report.rankers.rankers_findings`).
    """
    out = ["## Findings", ""]
    out += rankers_findings(findings) if rankers_lead is None else rankers_lead
    out += _ties_lines(findings.analysis)
    several = len(findings.readers) > 1
    for reader in findings.readers:
        out += _reader_findings(reader, f" (reader {md_text(reader.reader)})" if several else "", findings.idle)
    failures, untestable = findings.failures, findings.untestable
    if failures:
        out.append(f"- **Expectations.** {len(failures)} not met (each fails the run): " + "; ".join(failures) + ".")
    else:
        out.append("- **Expectations.** Every expectation the run could test is met.")
    if untestable:
        out.append("- **Not testable at this N.** " + " ".join(line + "." for line in untestable))
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class _Borrowed:
    """The sections among the tables that other modules render, asked for before this module's own."""

    #: the rankers' findings line and section (a run of one ranker: none)
    rankers_lead: list[str]
    rankers: str
    #: retrieval, LoCoMo's answer metrics and the importance scores, those the run has
    numbers: list[str]


def _borrowed(findings: Findings) -> _Borrowed:
    analysis = findings.analysis
    return _Borrowed(
        rankers_findings(findings),
        render_rankers_md(findings) if analysis.baseline_ranker else "",
        [
            section
            for section in (render_retrieval_md(analysis), render_answers_md(analysis), render_importance_md(analysis))
            if section
        ],
    )


def render_tables_md(findings: Findings) -> str:
    """The findings and the tables of ``report.md``: both regimes, every family, the H2 pairs, bins by type.

    A function of the findings (of the analysis and the budgets that bind for no history), with no
    run settings, dataset or paths, so the snapshot tests compare exactly this.
    """
    borrowed = _borrowed(findings)
    analysis = findings.analysis
    return _tables_md(
        findings,
        borrowed,
        render_findings_md(findings, borrowed.rankers_lead),
        render_cell_table(analysis, "b"),
        render_cell_table(analysis, "a"),
    )


def _tables_md(findings: Findings, borrowed: _Borrowed, findings_md: str, cells_b: str, cells_a: str) -> str:
    out = [
        findings_md,
        "## Regime (b): top-k retrieval",
        "",
        (
            "Oracle-answerable denominator N (random pooled over its seeds); errors binned irreversible, "
            "recoverable, distorted (a memory system of derived memories only; 0 for a store of raw units) or "
            "residual; two-bin = irr / (irr + rec) with its 95% question-cluster bootstrap interval; "
            "destruction = (irr + dis) / (irr + rec + dis); irr-rate = irr / N."
        ),
        "",
        cells_b,
        *borrowed.numbers,
        "## Regime (a): forced surviving gold (construct reference)",
        "",
        (
            "Forcing the surviving gold into the context leaves no recoverable error, so rec = 0 and the "
            "two-bin share is 1.00 wherever there is an irreversible error: those columns are left out "
            "(a violation shows as a failed H3 expectation)."
        ),
        "",
        cells_a,
        *([borrowed.rankers] if borrowed.rankers else []),
        render_hypotheses_md(findings),
        render_pairs_md(findings),
        render_bins_by_type_md(findings.analysis),
    ]
    return "\n".join(out)


def render_comparison_md(comparison: dict[str, Any]) -> str:
    """The robustness section of ``report.md``."""
    readers: list[str] = comparison["readers"]
    per = comparison["per_reader"]
    lines = [
        "## Robustness reader",
        "",
        "| reader | H1 rejected | H3 rejected | residual (regime b, all cells) |",
        "|---|---:|---:|---:|",
    ]
    for reader in readers:
        fam = per[reader]["families"]
        lines.append(
            f"| {reader} | {fam['H1']['rejected']}/{fam['H1']['tests']} | "
            f"{fam['H3']['rejected']}/{fam['H3']['tests']} | {sum(per[reader]['residual'].values())} |"
        )
    lines += ["", "Regime-(b) two-bin share ordering, highest first:", "", "| budget | " + " | ".join(readers) + " |"]
    lines.append("|---|" + "---|" * len(readers))
    budgets = list(per[readers[0]]["two_bin_ordering"])
    for budget in budgets:
        row = [" > ".join(per[r]["two_bin_ordering"].get(budget, [])) for r in readers]
        lines.append(f"| {budget} | " + " | ".join(row) + " |")
    first = readers[0]
    for other in readers[1:]:
        same = comparison["same_ordering_as"][first][other]
        counts = comparison["same_reject_counts_as"][first][other]
        lines.append("")
        lines.append(
            f"{other} vs {first}: same H1/H3 reject counts: "
            f"{'yes' if all(counts.values()) else 'no'}; same two-bin ordering at "
            f"{sum(same.values())} of {len(same)} budgets."
        )
    return "\n".join(lines) + "\n"


def _run_line(model: ReportModel) -> str:
    """What was run, in one line: data, reader, judge, ranker, N."""
    info, analysis = model.info, model.analysis
    st, ds = info.settings, info.dataset
    data = model.dataset or "records without run settings"
    readers = analysis.readers
    judges = list(model.judges) or [st.audit.judge if st is not None else "?"]
    answerable = analysis.counts.answerable()
    audited = ds.get("audited") or analysis.questions
    return (
        f"**Run:** {data}; reader {', '.join(readers)}; judge {', '.join(judges)}; ranker "
        f"{', '.join(model.rankers)}; N = {audited} questions audited, {answerable} oracle-answerable "
        "in some cell."
    )


#: Settings that are not named after their option.
_SETTING_LABELS = {"prices": "--restore-price", "model_usage": "model usage (real models)", "run_id": "run id (records)"}


def _setting_value(key: str, value: Any) -> str:
    if value is None or value == "" or (isinstance(value, list | tuple | dict) and not value):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "budgets" and isinstance(value, list | tuple):
        return ", ".join(budget_label(int(b)) for b in value)
    if isinstance(value, list | tuple):
        return ", ".join(md_text(str(v)) for v in value)  # names: policies, readers, rankers
    if isinstance(value, dict):
        return "; ".join(f"{md_text(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(value.items()))
    return str(value).replace("|", "\\|")  # a path or a number: one table cell


def _errata_md(errata: Any) -> list[str]:
    """The corrections applied to the data (``--restore-errata``), counted by type; nothing without errata."""
    if not errata:
        return []
    parts = ", ".join(errata.get("parts", []))
    out = [
        "",
        (
            f"Corrections applied to the data (`--restore-errata`, {errata['format']}, sha256 `{errata['sha256']}`; "
            f"parts: {parts}); {errata['read']} read:"
        ),
        "",
        "| error type | read | evidence replaced | answer replaced | excluded: unanswerable | question left out by the loader |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, c in sorted(errata["by_type"].items(), key=lambda kv: (-kv[1]["read"], kv[0])):  # summary.json sorts its keys
        out.append(f"| {kind} | {c['read']} | {c['evidence']} | {c['answer']} | {c['unanswerable']} | {c['not_applied']} |")
    return out


def render_settings_md(model: ReportModel) -> str:
    """The run's settings (as the options that set them), the dataset and the exclusions, as readable tables."""
    info = model.info
    ds = info.dataset
    out = ["## Run settings", ""]
    sha = ds.get("sha256", "unknown")
    official = ds.get("official")
    which = (
        "the official LongMemEval-S file"
        if official
        else "not the official longmemeval_s_cleaned.json"
        if official is False and ds.get("dataset", "longmemeval") == "longmemeval"
        else f"a {ds['dataset']} file"
        if ds.get("dataset")
        else "unknown"
    )
    out += ["| setting | value |", "|---|---|", f"| dataset sha256 | `{sha}` ({which}) |"]
    if ds:
        if ds.get("dataset"):
            out.append(f"| dataset loader | {ds['dataset']} |")
        out.append(f"| questions in the file / audited | {ds.get('questions', '?')} / {ds.get('audited', '?')} |")
        if ds.get("histories") is not None:
            out.append(f"| histories audited (questions sharing one are evicted once) | {ds['histories']} |")
    used = model.rankers
    out.append(f"| ranker | {', '.join(used)} ({'compared in one run' if len(used) > 1 else 'one per run'}; named in every record) |")
    for key, value in sorted((info.settings.to_json() if info.settings is not None else {}).items()):
        label = _SETTING_LABELS.get(key, f"--restore-{key.replace('_', '-')}")
        out.append(f"| {label} | {_setting_value(key, value)} |")
    out += ["", "## Exclusions", "", "| reason | questions |", "|---|---:|"]
    if info.exclusions:
        for reason, count in sorted(info.exclusions.items()):
            out.append(f"| {reason} | {count} |")
    else:
        out.append("| none | 0 |")
    repairs = ds.get("repairs") or {}
    if repairs:
        out += ["", "Flawed evidence references, each handled by the loader's one rule:", "", "| kind | references |", "|---|---:|"]
        out += [f"| {kind} | {count} |" for kind, count in sorted(repairs.items())]  # summary.json sorts its keys
    out += _errata_md(ds.get("errata"))
    failed = model.log.record_exclusions
    out += [
        "",
        "Records excluded from a cell's decomposition (failed model calls, never scored as wrong):",
        "",
        "| reason | records |",
        "|---|---:|",
    ]
    if failed:
        for reason, count in failed.items():
            out.append(f"| {reason} | {count} |")
    else:
        out.append("| none | 0 |")
    binding = ds.get("budget_binding") or {}
    if binding:
        out += ["", "## Budgets that bind", "", "| budget | share of histories it binds for |", "|---:|---:|"]
        for budget, share in sorted(binding.items(), key=lambda item: -int(item[0])):  # summary.json sorts its keys
            warn = " (binds for none: its cells evict nothing)" if share == 0 else ""
            out.append(f"| {int(budget):,} | {share:.2f}{warn} |")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class ReportMarkdown:
    """``report.md``, and the sections of it ``report.html`` shows, rendered once."""

    text: str
    #: the findings, and the cells tables of regimes (b) and (a), as markdown
    findings: str
    cells_b: str
    cells_a: str


def render_report_md(model: ReportModel) -> str:
    """``report.md`` as text (:func:`render_markdown`)."""
    return render_markdown(model).text


def render_markdown(model: ReportModel) -> ReportMarkdown:
    """``report.md`` from the report model (:mod:`pytest_restore.report.model`): the records'
    analysis and its findings, the run log ``summary.json`` holds and what the records say, all made
    before rendering; with the sections ``report.html`` shares.

    The answer first (what was run, the simulated-models notice where it
    applies, the findings), then the tables, families, cases and ablations;
    the run's settings and exclusions last. A run with a memory library gets
    its rows side by side (:mod:`pytest_restore.report.side_by_side`),
    their section before the checks'. The sections other modules render are
    asked for first, each module once, then this module's own.
    """
    found, log = model.findings, model.log
    info = log.run
    borrowed = _borrowed(found)
    cost = render_cost_md(log.cost)
    side = render_side_by_side_md(model.side) if model.side else ""
    checks = info.check_sections()
    cases, ablations = render_cases_md(model.cases), render_ablations_md(found.analysis)
    reader_model = simulated_reader_md(model.fake_reader)
    findings_md = render_findings_md(found, borrowed.rankers_lead)
    cells_b, cells_a = render_cell_table(found.analysis, "b"), render_cell_table(found.analysis, "a")
    mark = partial_mark(info)
    out = ([mark] if mark else []) + ["# Restore-counterfactual audit", ""]
    if log.simulated_note:  # the first thing a reader sees: what these figures are, when a model is simulated
        out += [log.simulated_note, ""]
    out += [_run_line(model), ""]
    out += [_tables_md(found, borrowed, findings_md, cells_b, cells_a)]
    if found.comparison is not None:
        out += ["", render_comparison_md(found.comparison)]
    if side:
        out += ["", side]
    for section in checks:
        out += ["", section]
    out += ["", cases, ablations]
    if reader_model:
        out += ["", reader_model]
    for section in (render_model_calls_md(log.model_calls), cost):
        if section:
            out += ["", section]
    out += ["", render_settings_md(model)]
    return ReportMarkdown("\n".join(out), findings_md, cells_b, cells_a)


def partial_mark(info: RunInfo) -> str:
    """The line a partial report opens with (its blank line included); "" for a whole report."""
    partial = info.provenance.partial if info.provenance is not None else None
    if partial is None:
        return ""
    return (
        f"> **PARTIAL REPORT**: {partial}. Not the whole grid: the cells that did not run are listed "
        "under Grid coverage, and no hypothesis family is decided on a part.\n"
    )


def render_model_calls_md(calls: Mapping[str, ReaderCalls]) -> str:
    """The model calls section: unique reader and judge calls against naive, from the records' prompt ids."""
    if not calls:
        return ""
    out = [
        "## Model calls",
        "",
        (
            "Main conditions (oracle, policy, restored) of every record. Naive: one call per condition "
            "of every record; unique: distinct requests, each sent once (within a process by the audit, "
            "across processes by the response cache)."
        ),
        "",
        "| reader | reader naive | reader unique | ratio | judge naive | judge unique | ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for reader, c in calls.items():
        out.append(
            f"| {md_text(reader)} | {c.reader_naive} | {c.reader_unique} | {num(c.reader_ratio, 2)} "
            f"| {c.judge_naive} | {c.judge_unique} | {num(c.judge_ratio, 2)} |"
        )
    return "\n".join(out) + "\n"

