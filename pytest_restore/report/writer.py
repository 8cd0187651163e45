"""The report: the one place that writes what a run found.

From the per-question records (and the run's settings) it writes, into the
report directory:

- ``records.jsonl``: every record, sorted, one JSON object per line;
- ``cells.csv``: one row per policy x budget x regime x reader, with the
  bootstrap intervals of the two-bin share, ``irr/N`` and accuracy;
- ``hypotheses.json``: every test of every hypothesis family (statistic,
  interval, raw and Holm-adjusted p, decision) and the H2 matching table;
- ``report.md``: the per-cell tables in the paper's Table 1 layout, for both
  regimes, the hypothesis families, the H2 pairs, the bins by question type,
  the restore-tightness ablations, one real case per bin and policy, the
  exclusions, the dataset's sha256 and the run's ranker;
- ``figure.png``/``figure.svg``: the three-bin shares per policy and budget;
- ``summary.json``: run settings, dataset, counts and exclusions with reasons.

The statistics pass (:func:`pytest_restore.stats.analysis.analyse`) runs once per
report, with the bootstrap settings of the run (``bootstrap``,
``bootstrap_seed``, ``equivalence_margin``, ``caliper`` in ``RunInfo.settings``).
Everything is a function of the records and ``summary.json``'s run section,
so ``python -m pytest_restore report`` rebuilds the same files from saved
records, byte for byte. Output holds no timestamps or machine-dependent values.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pytest_restore import record as record_module
from pytest_restore.audit import ablations
from pytest_restore.audit.robustness import compare_readers, render_comparison_md
from pytest_restore.audit.run import model_calls
from pytest_restore.memory.eviction import BUILTIN_POLICIES
from pytest_restore.models.fake import simulated_note, simulated_reader_md
from pytest_restore.record import BINS, DEFAULT_RANKER, Record, RecordError, tally_cells
from pytest_restore.record import dumps as records_text
from pytest_restore.stats import analysis as stats
from pytest_restore.stats.analysis import (
    INTERVAL_COLUMNS,
    PROTOCOL_COLUMNS,
    Analysis,
    CellStats,
    HypothesisTest,
)

CELL_COLUMNS = PROTOCOL_COLUMNS
EXTRA_COLUMNS = ("irr_share", "rec_share", "res_share", "negative_restore_gain", "excluded")
#: Every column of ``cells.csv``: the figures of docs/PROTOCOL.md section 7, their intervals, the rest.
CSV_COLUMNS = CELL_COLUMNS + INTERVAL_COLUMNS + EXTRA_COLUMNS


_R = TypeVar("_R", bound=Mapping[str, Any])
_BUILTIN_ORDER = {cls.name: i for i, cls in enumerate(BUILTIN_POLICIES)}


#: Saved records that cannot be turned into a report (the name this module always used).
RecordsError = RecordError


@dataclass(frozen=True)
class RunInfo:
    """What a report says about the run besides its records."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    dataset: Mapping[str, Any] = field(default_factory=dict)
    exclusions: Mapping[str, int] = field(default_factory=dict)
    #: results of checks that need models (calibration gate, judge audit): each a
    #: dict with its figures under "result" and its report section under "markdown"
    checks: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The run section of ``summary.json``."""
        out = {
            "settings": dict(self.settings),
            "dataset": dict(self.dataset),
            "exclusions": dict(sorted(self.exclusions.items())),
        }
        if self.checks:
            out["checks"] = dict(sorted(self.checks.items()))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        """Read the run section back."""
        return cls(
            data.get("settings", {}), data.get("dataset", {}), data.get("exclusions", {}), data.get("checks", {})
        )


def policy_order(name: str) -> tuple[int, str]:
    """Built-in policies in the paper's order, then the others by name."""
    return (_BUILTIN_ORDER.get(name, len(_BUILTIN_ORDER)), name)


def record_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """The canonical order of records: by cell, then seed, regime and question."""
    return (
        policy_order(r["policy"]),
        -r["budget"],
        str(r["reader"]),
        r["seed"],
        r["regime"],
        r["question_id"],
    )


def sort_records(records: Iterable[_R]) -> list[_R]:
    """Records in canonical order (arrival order across workers is not fixed)."""
    return sorted(records, key=record_order)


def cells_of(records: Iterable[Record]) -> dict[tuple[str, int, str, str], list[Record]]:
    """Records grouped by (policy, budget, regime, reader), keys in canonical order."""
    groups: dict[tuple[str, int, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r["policy"], r["budget"], r["regime"], r["reader"])].append(r)
    return {
        k: groups[k] for k in sorted(groups, key=lambda k: (policy_order(k[0]), -k[1], k[3], k[2]))
    }


# -- the statistics pass --------------------------------------------------------


def analyse_records(records: Sequence[Record], info: RunInfo | None = None) -> Analysis:
    """The statistics pass with the run's bootstrap settings (defaults where unset).

    ``info.settings`` may carry ``bootstrap`` (resamples), ``bootstrap_seed``,
    ``equivalence_margin`` and ``caliper``; missing keys take the paper's values.
    """
    settings = info.settings if info is not None else {}
    return stats.analyse(
        records,
        resamples=int(settings.get("bootstrap", stats.DEFAULT_RESAMPLES)),
        seed=int(settings.get("bootstrap_seed", stats.DEFAULT_SEED)),
        equivalence_margin=float(
            settings.get("equivalence_margin", stats.DEFAULT_EQUIVALENCE_MARGIN)
        ),
        caliper=float(settings.get("caliper", stats.DEFAULT_CALIPER)),
    )


# -- cells.csv --------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _cells_in_order(analysis: Analysis) -> list[CellStats]:
    """The analysis's cells in the report's order: policy, loosest budget first, reader, regime."""
    return sorted(analysis.cells, key=lambda c: (policy_order(c.policy), -c.budget, c.reader, c.regime))


def _bin_share(cell: CellStats, bin_: str) -> float | None:
    count = {"irreversible": cell.irr, "recoverable": cell.rec, "residual": cell.res}[bin_]
    return count / cell.err if cell.err else None


def cell_rows(records: Sequence[Record], analysis: Analysis | None = None) -> list[dict[str, str]]:
    """The rows of ``cells.csv`` as formatted strings, from the statistics pass's tally."""
    analysis = analysis if analysis is not None else analyse_records(records)
    rows = []
    for cell in _cells_in_order(analysis):
        row = {
            "policy": cell.policy,
            "budget": str(cell.budget),
            "regime": cell.regime,
            "reader": cell.reader,
            "N": str(cell.N),
            "err": str(cell.err),
            "irr": str(cell.irr),
            "rec": str(cell.rec),
            "res": str(cell.res),
            "two_bin_share": _fmt(cell.two_bin_share),
            "irr_rate": _fmt(cell.irr_rate),
            "accuracy": _fmt(cell.accuracy),
            "gold_evicted_rate": _fmt(cell.gold_evicted_rate),
        }
        for column in INTERVAL_COLUMNS:
            row[column] = _fmt(getattr(cell, column))
        row.update(
            {
                "irr_share": _fmt(_bin_share(cell, "irreversible")),
                "rec_share": _fmt(_bin_share(cell, "recoverable")),
                "res_share": _fmt(_bin_share(cell, "residual")),
                "negative_restore_gain": str(cell.negative_restore_gain),
                "excluded": str(cell.excluded),
            }
        )
        rows.append(row)
    return rows


def render_cells_csv(records: Sequence[Record], analysis: Analysis | None = None) -> str:
    """``cells.csv`` as text."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(cell_rows(records, analysis))
    return buf.getvalue()


def render_records_jsonl(records: Iterable[Mapping[str, Any]], *, ordered: bool = False) -> str:
    """``records.jsonl`` as text, in canonical order (``ordered``: the records already are)."""
    return records_text(records if ordered else sort_records(records))


def render_hypotheses_json(analysis: Analysis, records: Sequence[Record] | None = None) -> str:
    """``hypotheses.json`` as text: settings, per-family summary, every test, the H2 matching.

    With ``records``, also the restore-tightness ablations (key ``ablations``).
    """
    data = analysis.to_json()
    if records is not None:
        data["ablations"] = ablations.to_json(ablation_rows(records, analysis), ablations.by_cell(records))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def ablation_rows(records: Sequence[Record], analysis: Analysis) -> list[ablations.AblationRow]:
    """The ablations' pooled rows, with the statistics pass's bootstrap settings."""
    s = analysis.settings
    return ablations.summarise(records, resamples=s.resamples, seed=s.seed, confidence=s.confidence)


def render_ablations_md(records: Sequence[Record], analysis: Analysis) -> str:
    """The restore-tightness section of ``report.md``."""
    cells = sorted(
        ablations.by_cell(records),
        key=lambda c: (c["reader"], policy_order(c["policy"]), -c["budget"]),
    )
    return ablations.render_md(
        ablation_rows(records, analysis), cells, label=_budget_label, confidence=analysis.settings.confidence
    )


# -- one real case per bin --------------------------------------------------------------

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
                f"- **{r['bin']}** ({_budget_label(int(r['budget']))}, seed {r['seed']}, question "
                f"`{r['question_id']}`, {r['question_type']}): {_case_text(r.get('question'))}"
            ),
            f"  - reference: {_case_text(r.get('reference'))}",
            f"  - policy answer: {_case_text(r.get('policy_answer'))}",
            f"  - restored answer: {_case_text(r.get('restored_answer'))}",
            f"  - gold evicted: {_evicted_text(r)}",
        ]
    return "\n".join(out) + "\n"


# -- report.md ----------------------------------------------------------------------


_budget_label = stats.budget_label


def _short(value: float) -> str:
    """``0.61 -> ".61"`` (the paper's interval style); 1.00 stays ``1.00``."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def _share_with_interval(point: float | None, lo: float | None, hi: float | None) -> str:
    if point is None:
        return "-"
    if lo is None or hi is None:
        return f"{point:.2f}"
    return f"{point:.2f} ({_short(lo)}-{_short(hi)})"


def render_cell_table(
    records: Sequence[Record], regime: str, analysis: Analysis | None = None
) -> str:
    """The per-cell table of one regime, in the paper's Table 1 layout (markdown).

    Regime (a) leaves out ``rec`` and the two-bin share, constant by construction.
    """
    analysis = analysis if analysis is not None else analyse_records(records)
    full = regime != "a"
    if full:
        header = "| policy | budget | reader | N | err | irr | rec | res | two-bin (95% CI) | irr-rate | accuracy | gold evicted |"
        rule = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    else:
        header = "| policy | budget | reader | N | err | irr | res | irr-rate | accuracy | gold evicted |"
        rule = "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    lines = [header, rule]
    previous = None
    for cell in _cells_in_order(analysis):
        if cell.regime != regime:
            continue
        two_bin = _share_with_interval(cell.two_bin_share, cell.two_bin_lo, cell.two_bin_hi)
        name = cell.policy if cell.policy != previous else ""
        previous = cell.policy
        middle = f"{cell.rec} | {cell.res} | {two_bin}" if full else f"{cell.res}"
        lines.append(
            f"| {name} | {_budget_label(cell.budget)} | {cell.reader} | {cell.N} | {cell.err} | {cell.irr} | {middle} | "
            f"{_fmt(cell.irr_rate, 2) or '-'} | {_fmt(cell.accuracy, 2) or '-'} | {_fmt(cell.gold_evicted_rate, 2) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(lo: float | None, hi: float | None, digits: int = 3) -> str:
    return "-" if lo is None or hi is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


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
            f"| {t.name} | {t.reader} | {t.n_questions} | {_num(t.statistic)} | {_interval(t.ci_lo, t.ci_hi)} | "
            f"{_num(t.p_raw, 4)} | {_num(t.p_holm, 4)} | {t.decision} | {_expectation(t)} |"
        )
    if not tests:
        lines.append("| (no test: the grid holds none of this family's cells) | | | | | | | | |")
    return "\n".join(lines) + "\n"


def render_hypotheses_md(analysis: Analysis) -> str:
    """The hypothesis-family sections of ``report.md``, one per declared family."""
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
            f"met it ({stats.POWER:.0%} power at Holm's strictest level for the effect the family is about)."
        ),
        "",
        "| family | reader | tests | empty | rejected | expectation not met | not testable at this N |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in analysis.summary():
        out.append(
            f"| {row['family']} | {row['reader']} | {row['tests']} | {row['empty']} | {row['rejected']} | "
            f"{row['expectation_unmet']} | {row['not_testable']} |"
        )
    failures = session_failures(analysis)
    out += ["", "Expectations not met (each fails the session):" if failures else "Every testable expectation is met.", ""]
    if failures:
        out += [f"- {line}" for line in failures] + [""]
    untestable = untestable_lines(analysis)
    if untestable:
        out += ["Not testable at this N (reported, not failed):", ""] + [f"- {line}" for line in untestable] + [""]
    for family in stats.FAMILIES:
        out += [f"### {family.title}", "", family.tests, "", render_family_table(analysis.family(family.name))]
    return "\n".join(out)


def render_decisions_md(analysis: Analysis) -> str:
    """Every hypothesis test's decision and expectation, one row each (what a user's snapshot pins)."""
    lines = ["| family | test | reader | decision | expectation |", "|---|---|---|---|---|"]
    for t in analysis.tests:
        lines.append(f"| {t.family} | {t.name} | {t.reader} | {t.decision} | {_expectation(t)} |")
    return "\n".join(lines) + "\n"


def render_pairs_md(analysis: Analysis) -> str:
    """The H2 pairs table: every candidate pair, matched or not and why, with the resolution."""
    resolution = {
        (t.reader, t.budget, t.policy, t.other): t.half_width for t in analysis.family("H2")
    }
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
            f"| {m.reader} | {_budget_label(m.budget)} | {m.policy} vs {m.other} | {_num(m.accuracy)} | "
            f"{_num(m.other_accuracy)} | {_num(m.gap)} | {'yes' if m.matched else 'no'} | {m.reason} | "
            f"{_num(m.irr_rate_difference)} | {'±' + _num(half) if half is not None else '-'} |"
        )
    if not analysis.matching:
        out.append("| (no candidate pair) | | | | | | | | | |")
    return "\n".join(out) + "\n"


def render_bins_by_type_md(records: Sequence[Record]) -> str:
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
            "| reader | regime | question type | N | err | irr | rec | res | irr share | rec share "
            "| res share | two-bin |"
        ),
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in stats.bins_by_type(records):
        out.append(
            f"| {row['reader']} | {row['regime']} | {row['question_type']} | {row['N']} | {row['err']} | "
            f"{row['irr']} | {row['rec']} | {row['res']} | {_num(row['irr_share'], 2)} | "
            f"{_num(row['rec_share'], 2)} | {_num(row['res_share'], 2)} | {_num(row['two_bin_share'], 2)} |"
        )
    return "\n".join(out) + "\n"


def record_exclusions(records: Sequence[Record]) -> dict[str, int]:
    """Excluded records by reason (model failures), over all cells."""
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        if r["excluded"] is not None:
            counts[str(r["excluded"])] += 1
    return dict(sorted(counts.items()))


def _evicting(analysis: Analysis) -> list[str]:
    """The policies a finding is about: every policy but the reference and the control."""
    st = analysis.settings
    names = {c.policy for c in analysis.cells if c.policy not in (st.reference, st.control)}
    return sorted(names, key=stats.policy_sort_key)


def _ci(lo: float | None, hi: float | None) -> str:
    return "" if lo is None or hi is None else f" (95% CI {_short(lo)}-{_short(hi)})"


def render_findings_md(analysis: Analysis) -> str:
    """The answer first: the paper's findings for this run, in words, with their intervals.

    In the paper's order: destruction's share at the loosest budget per policy
    and whether its lower bound clears 0.5 (R1); where the two regimes differ
    (H3); whether an accuracy-matched pair dissociates, with the positive
    control's resolution (H2, TOST, positive control); then the expectations.
    """
    out = ["## Findings", ""]
    readers = sorted({c.reader for c in analysis.cells})
    for reader in readers:
        tag = f" (reader {reader})" if len(readers) > 1 else ""
        budgets = sorted({c.budget for c in analysis.cells if c.reader == reader}, reverse=True)
        if not budgets:
            continue
        loose = budgets[0]
        parts = []
        for policy in _evicting(analysis):
            cell = analysis.cell(policy, loose, "b", reader)
            if cell is None:
                continue
            if cell.two_bin_share is None:
                parts.append(f"{policy} no restorable error")
                continue
            verdict = (
                "a majority" if cell.two_bin_lo is not None and cell.two_bin_lo > 0.5 else "not shown a majority"
            )
            parts.append(f"{policy} {cell.two_bin_share:.2f}{_ci(cell.two_bin_lo, cell.two_bin_hi)}, {verdict}")
        out.append(
            f"- **Destruction{tag}.** At {_budget_label(loose)} under top-k retrieval, irreversible errors as a "
            "share of those a restore fixes, irr / (irr + rec) (a majority where the lower bound clears "
            "0.5): " + ("; ".join(parts) if parts else "no evicting policy in the run") + "."
        )
        h3 = [t for t in analysis.family("H3", reader) if t.decision != "empty"]
        moved = [t for t in h3 if t.decision == "reject"]
        shown = ", ".join(
            f"{t.policy} {_budget_label(t.budget)} {t.statistic:+.2f}{_ci(t.ci_lo, t.ci_hi)}"
            for t in moved[:4]
            if t.statistic is not None
        )
        violations = [t for t in h3 if t.expectation_met is False]
        out.append(
            f"- **Regimes{tag}.** The recoverable share differs between top-k retrieval (b) and forced gold (a) "
            f"in {len(moved)} of {len(h3)} cells (H3, Holm)"
            + (f": {shown}" + (" ..." if len(moved) > 4 else "") if moved else "")
            + (
                f"; regime (a) holds recoverable errors in {len(violations)} cells (construct violation)."
                if violations
                else "; regime (a) holds no recoverable error, as it must."
            )
        )
        pairs = [m for m in analysis.matching if m.reader == reader]
        matched = [m for m in pairs if m.matched]
        h2 = [t for t in analysis.family("H2", reader) if t.decision != "empty"]
        split = [t for t in h2 if t.decision == "reject"]
        halves = [t.half_width for t in h2 if t.half_width is not None]
        resolution = f" at a resolution of ±{min(halves):.3f} to ±{max(halves):.3f}" if halves else ""
        control = [t for t in analysis.family(stats.POSITIVE_CONTROL, reader) if t.decision != "empty"]
        detected = [t for t in control if t.expectation_met]
        untested = [t for t in control if not t.testable]
        diffs = [t.statistic for t in control if t.statistic is not None]
        control_text = (
            f" The positive control is detected in {len(detected)} of {len(control)} contrasts"
            + (f" (irr-rate difference {min(diffs):+.2f} to {max(diffs):+.2f})" if diffs else "")
            + (f"; {len(untested)} not testable at this N" if untested else "")
            + "."
            if control
            else " The run has no positive control."
        )
        out.append(
            f"- **Matched accuracy{tag}.** {len(matched)} of {len(pairs)} policy pairs are accuracy-matched; "
            + (
                f"{len(split)} {'dissociates' if len(split) == 1 else 'dissociate'} on irr / N (H2, Holm)"
                + (": " + ", ".join(f"{t.policy} vs {t.other} {_budget_label(t.budget)}" for t in split) if split else "")
                + resolution
                + "."
                if h2
                else "no pair to test."
            )
            + control_text
        )
    failures = session_failures(analysis)
    untestable = untestable_lines(analysis)
    if failures:
        out.append(f"- **Expectations.** {len(failures)} not met (each fails the run): " + "; ".join(failures) + ".")
    else:
        out.append("- **Expectations.** Every expectation the run could test is met.")
    if untestable:
        out.append("- **Not testable at this N.** " + " ".join(line + "." for line in untestable))
    return "\n".join(out) + "\n"


def render_tables_md(records: Sequence[Record], analysis: Analysis) -> str:
    """The findings and the tables of ``report.md``: both regimes, every family, the H2 pairs, bins by type.

    A function of the records and the statistics settings alone (no run
    settings, dataset or paths), so the snapshot tests compare exactly this.
    """
    out = [
        render_findings_md(analysis),
        "## Regime (b): top-k retrieval",
        "",
        (
            "Oracle-answerable denominator N (random pooled over its seeds); errors binned irreversible, "
            "recoverable or residual; two-bin = irr / (irr + rec) with its 95% question-cluster bootstrap "
            "interval; irr-rate = irr / N."
        ),
        "",
        render_cell_table(records, "b", analysis),
        "## Regime (a): forced surviving gold (construct reference)",
        "",
        (
            "Forcing the surviving gold into the context leaves no recoverable error, so rec = 0 and the "
            "two-bin share is 1.00 wherever there is an irreversible error: those columns are left out "
            "(a violation shows as a failed H3 expectation)."
        ),
        "",
        render_cell_table(records, "a", analysis),
        render_hypotheses_md(analysis),
        render_pairs_md(analysis),
        render_bins_by_type_md(records),
    ]
    return "\n".join(out)


def _run_line(records: Sequence[Record], info: RunInfo) -> str:
    """What was run, in one line: data, reader, judge, ranker, N."""
    st, ds = info.settings, info.dataset
    data = dataset_label(info) or "records without run settings"
    readers = sorted({str(r["reader"]) for r in records})
    judges = sorted({str(r.get("judge")) for r in records if r.get("judge")}) or [str(st.get("judge", "?"))]
    answerable = len({r["question_id"] for r in records if r["oracle_correct"] is True and r["excluded"] is None})
    audited = ds.get("audited") or len({r["question_id"] for r in records})
    return (
        f"**Run:** {data}; reader {', '.join(readers)}; judge {', '.join(judges)}; ranker "
        f"{', '.join(rankers_of(records))}; N = {audited} questions audited, {answerable} oracle-answerable "
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
        return ", ".join(_budget_label(int(b)) for b in value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(value.items()))
    return str(value)


def render_settings_md(records: Sequence[Record], info: RunInfo) -> str:
    """The run's settings (as the options that set them), the dataset and the exclusions, as readable tables."""
    ds = info.dataset
    out = ["## Run settings", ""]
    sha = ds.get("sha256", "unknown")
    official = ds.get("official")
    which = (
        "the official LongMemEval-S file"
        if official
        else "not the official longmemeval_s_cleaned.json"
        if official is False
        else "unknown"
    )
    out += ["| setting | value |", "|---|---|", f"| dataset sha256 | `{sha}` ({which}) |"]
    if ds:
        out.append(f"| questions in the file / audited | {ds.get('questions', '?')} / {ds.get('audited', '?')} |")
    out.append(f"| ranker | {', '.join(rankers_of(records))} (one per run; named in every record) |")
    for key in sorted(info.settings):
        label = _SETTING_LABELS.get(key, f"--restore-{key.replace('_', '-')}")
        out.append(f"| {label} | {_setting_value(key, info.settings[key])} |")
    out += ["", "## Exclusions", "", "| reason | questions |", "|---|---:|"]
    if info.exclusions:
        for reason, count in sorted(info.exclusions.items()):
            out.append(f"| {reason} | {count} |")
    else:
        out.append("| none | 0 |")
    failed = record_exclusions(records)
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
    return "\n".join(out) + "\n"


def render_report_md(
    records: Sequence[Record],
    info: RunInfo,
    analysis: Analysis | None = None,
    calls: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """``report.md`` as text (``calls``: :func:`model_calls` of the records, when already counted).

    The answer first (what was run, the simulated-models notice where it
    applies, the findings), then the tables, families, cases and ablations;
    the run's settings and exclusions last.
    """
    if analysis is None:
        analysis = analyse_records(records, info)
    out = ["# Restore-counterfactual audit", ""]
    note = simulated_note(records, info.dataset.get("official"))
    if note:  # the first thing a reader sees: what these figures are, when a model is simulated
        out += [note, ""]
    out += [_run_line(records, info), ""]
    out += [render_tables_md(records, analysis)]
    comparison = compare_readers(analysis)
    if comparison is not None:
        out += ["", render_comparison_md(comparison)]
    for name in sorted(info.checks):
        out += ["", str(info.checks[name].get("markdown", ""))]
    out += ["", render_cases_md(records), render_ablations_md(records, analysis)]
    reader_model = simulated_reader_md(records)
    if reader_model:
        out += ["", reader_model]
    section = render_model_calls_md(records, calls)
    if section:
        out += ["", section]
    out += ["", render_settings_md(records, info)]
    return "\n".join(out)


def render_model_calls_md(records: Sequence[Record], calls: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The model calls section: unique reader and judge calls against naive, from the records' prompt ids."""
    if calls is None:
        calls = model_calls(records)
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
            f"| {reader} | {c['reader_naive']} | {c['reader_unique']} | {_num(c['reader_ratio'], 2)} "
            f"| {c['judge_naive']} | {c['judge_unique']} | {_num(c['judge_ratio'], 2)} |"
        )
    return "\n".join(out) + "\n"


# -- the session verdict --------------------------------------------------------------

def _reader_suffix(analysis: Analysis, test: HypothesisTest) -> str:
    readers = {t.reader for t in analysis.tests}
    return f" (reader {test.reader})" if len(readers) > 1 else ""


def session_failures(analysis: Analysis) -> list[str]:
    """One short line, in words, per expectation the run could test and did not meet.

    An H1 cell not rejected, a positive-control contrast that is not
    significant with the control the more destructive (where the run had the
    power to show it), and an H3 construct violation (a recoverable error in
    regime (a)). Empty tests carry no expectation and are not failures. The
    grid items fail on the same lines (:func:`pytest_restore.stats.analysis.cell_verdicts`).
    """
    return [
        stats.family_of(t.family).describe(t) + _reader_suffix(analysis, t) for t in analysis.failures()
    ]


def untestable_lines(analysis: Analysis) -> list[str]:
    """One line per family: the expectations this run could not test, why, and what would make them testable."""
    lines = []
    for family in stats.FAMILIES:
        tests = [t for t in analysis.untestable() if t.family == family.name]
        if not tests:
            continue
        needed = [int(x) for t in tests for x in re.findall(r"about (\d+) questions", t.power_note)]
        widths = [t.half_width for t in tests if t.half_width is not None]
        n = max(t.n_questions for t in tests)
        text = f"{family.name}: {len(tests)} of {len(analysis.family(family.name))} tests not testable at {n} questions"
        if widths:
            text += (
                f": intervals ±{min(widths):.2f} to ±{max(widths):.2f}, too wide to detect the "
                f"{family.effect:.2f} {family.statistic} the family is about"
            )
        if needed:
            text += (
                f"; about {max(needed)} questions would test them (raise --restore-questions, or "
                "--restore-embedded-questions for the embedded data)"
            )
        lines.append(text)
    return lines


# -- writing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """Where the report was written, and the expectations it found unmet."""

    out_dir: Path
    records: Path
    cells: Path
    report: Path
    summary: Path
    hypotheses: Path
    figure_png: Path
    figure_svg: Path
    failures: tuple[str, ...] = ()
    #: one line per family whose unmet expectations this run had no power to meet
    untestable: tuple[str, ...] = ()


def summary_json(
    records: Sequence[Record],
    info: RunInfo,
    analysis: Analysis | None = None,
    calls: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """``summary.json``: the run section plus counts (and the hypothesis summary)."""
    bins = {b: sum(1 for r in records if r["bin"] == b) for b in BINS}
    out: dict[str, Any] = {
        "run": info.to_json(),
        "counts": {
            "records": len(records),
            "cells": len(cells_of(records)),
            "questions": len({r["question_id"] for r in records}),
            "excluded_records": sum(1 for r in records if r["excluded"] is not None),
            "bins": bins,
        },
        "record_exclusions": record_exclusions(records),
        "model_calls": dict(calls) if calls is not None else model_calls(records),
    }
    note = simulated_note(records, info.dataset.get("official"))
    out["simulated"] = note is not None
    if note:
        out["simulated_note"] = note
    if analysis is not None:
        out["hypotheses"] = analysis.summary()
        out["failures"] = session_failures(analysis)
        out["not_testable"] = untestable_lines(analysis)
    return out


def write_report(records: Sequence[Record], info: RunInfo, out_dir: str | Path) -> ReportFiles:
    """Write every report file into ``out_dir``; the statistics pass runs once.

    ``ReportFiles.failures`` lists the family expectations that failed (see
    :func:`session_failures`); the plugin fails the session on them.
    """
    out = Path(out_dir)
    ordered = sort_records(Record.of(r) for r in records)
    out.mkdir(parents=True, exist_ok=True)
    analysis = analyse_records(ordered, info)
    files = ReportFiles(
        out_dir=out,
        records=out / "records.jsonl",
        cells=out / "cells.csv",
        report=out / "report.md",
        summary=out / "summary.json",
        hypotheses=out / "hypotheses.json",
        figure_png=out / "figure.png",
        figure_svg=out / "figure.svg",
        failures=tuple(session_failures(analysis)),
        untestable=tuple(untestable_lines(analysis)),
    )
    files.records.write_text(render_records_jsonl(ordered, ordered=True), encoding="utf-8")
    files.cells.write_text(render_cells_csv(ordered, analysis), encoding="utf-8")
    files.hypotheses.write_text(render_hypotheses_json(analysis, ordered), encoding="utf-8")
    calls = model_calls(ordered)
    files.report.write_text(render_report_md(ordered, info, analysis, calls), encoding="utf-8")
    files.summary.write_text(
        json.dumps(summary_json(ordered, info, analysis, calls), indent=2, sort_keys=True) + "\n",
        encoding="utf-8",
    )
    from pytest_restore.report.figure import (
        write_figure,  # matplotlib loads when a report is written
    )

    write_figure(analysis.cells, out, dataset=dataset_label(info))
    return files


def dataset_label(info: RunInfo) -> str:
    """The dataset in a few words: its name and how many questions were audited."""
    name = str(info.settings.get("data") or "")
    if not name or name == "embedded synthetic":
        name = "embedded synthetic LongMemEval-S" if name else ""
    audited = info.dataset.get("audited")
    return ", ".join(x for x in (name, f"{audited} questions" if audited else "") if x)


# -- reading saved records ---------------------------------------------------------------


def read_records(path: str | Path) -> list[Record]:
    """Read and validate ``records.jsonl`` (see :func:`pytest_restore.record.read_records`).

    Records of more than one ranker are refused: a report holds one ranker.
    """
    records = record_module.read_records(path)
    used = rankers_of(records)
    if len(used) > 1:
        raise RecordsError(
            f"{path}: records of {len(used)} rankers ({', '.join(used)}); a report holds one ranker: "
            "report each ranker's records separately"
        )
    return records


def rankers_of(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The rankers the records were read with (records older than the field used BM25-lite)."""
    return sorted({str(r.get("ranker") or DEFAULT_RANKER) for r in records})


def read_run_info(records_path: str | Path) -> RunInfo:
    """The run section of the ``summary.json`` beside ``records_path``; empty when absent."""
    summary = Path(records_path).with_name("summary.json")
    if not summary.exists():
        return RunInfo()
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordsError(f"{summary}: cannot read the run section: {exc}") from None
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(run, dict):
        raise RecordsError(f"{summary}: no 'run' object")
    return RunInfo.from_json(run)


def check_run_info(records: Sequence[Record], info: RunInfo, records_path: str | Path) -> None:
    """The records must be of the run ``summary.json`` describes: same run id, granularity and ranker.

    Fields absent on either side (older files) are not compared. The first
    conflict is a one-line :class:`RecordsError`.
    """
    first = records[0]
    summary = Path(records_path).with_name("summary.json")
    for name in ("run_id", "granularity", "ranker"):
        ours, theirs = first.get(name), info.settings.get(name)
        if ours is not None and theirs is not None and ours != theirs:
            raise RecordsError(
                f"{records_path}: line 1: question {first.question_id!r}: field {name!r}: "
                f"{ours!r} but {summary} says {theirs!r} (records of another run)"
            )


def terminal_lines(records: Sequence[Record]) -> list[str]:
    """A short summary for the end of the pytest run: regime (b) per cell."""
    lines = [
        f"{'policy':<16}{'budget':>8}{'N':>7}{'err':>6}{'irr':>6}{'rec':>6}{'res':>6}{'two-bin':>9}{'acc':>7}"
    ]
    cells = tally_cells(records)
    for (policy, budget, regime, reader) in sorted(cells, key=lambda k: (policy_order(k[0]), -k[1], k[3], k[2])):
        if regime != "b":
            continue
        fig = cells[(policy, budget, regime, reader)]
        lines.append(
            f"{policy:<16}{_budget_label(budget):>8}{fig.N:>7}{fig.err:>6}{fig.irr:>6}{fig.rec:>6}{fig.res:>6}"
            f"{_fmt(fig.two_bin_share, 2) or '-':>9}{_fmt(fig.accuracy, 2) or '-':>7}"
        )
    return lines
