"""The report: the one place that writes what a run found.

From the per-question records (and the run's settings) it writes, into the
report directory:

- ``records.jsonl``: every record, sorted, one JSON object per line;
- ``cells.csv``: one row per policy x budget x regime x reader;
- ``report.md``: the per-cell tables in the paper's Table 1 layout, for both
  regimes, with the exclusions and the dataset's sha256;
- ``summary.json``: run settings, dataset, counts and exclusions with reasons.

Everything is a function of the records and ``summary.json``'s run section,
so ``python -m pytest_restore report`` rebuilds the same files from saved
records, byte for byte. Output holds no timestamps or machine-dependent values.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .audit import BINS, CellFigures, Record, tally
from .eviction import BUILTIN_POLICIES

CELL_COLUMNS = (
    "policy",
    "budget",
    "regime",
    "reader",
    "N",
    "err",
    "irr",
    "rec",
    "res",
    "two_bin_share",
    "irr_rate",
    "accuracy",
    "gold_evicted_rate",
)
EXTRA_COLUMNS = ("irr_share", "rec_share", "res_share", "negative_restore_gain", "excluded")

REQUIRED_RECORD_KEYS = (
    "question_id",
    "question_type",
    "policy",
    "budget",
    "seed",
    "regime",
    "reader",
    "oracle_correct",
    "policy_correct",
    "restored_correct",
    "negative_restore_gain",
    "gold_units",
    "gold_evicted",
    "bin",
    "excluded",
)

_BUILTIN_ORDER = {cls.name: i for i, cls in enumerate(BUILTIN_POLICIES)}


class RecordsError(ValueError):
    """Saved records that cannot be turned into a report."""


@dataclass(frozen=True)
class RunInfo:
    """What a report says about the run besides its records."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    dataset: Mapping[str, Any] = field(default_factory=dict)
    exclusions: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The run section of ``summary.json``."""
        return {
            "settings": dict(self.settings),
            "dataset": dict(self.dataset),
            "exclusions": dict(sorted(self.exclusions.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        """Read the run section back."""
        return cls(data.get("settings", {}), data.get("dataset", {}), data.get("exclusions", {}))


def policy_order(name: str) -> tuple[int, str]:
    """Built-in policies in the paper's order, then the others by name."""
    return (_BUILTIN_ORDER.get(name, len(_BUILTIN_ORDER)), name)


def record_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """The canonical order of records: by cell, then seed, regime and question."""
    return (policy_order(r["policy"]), -r["budget"], str(r["reader"]), r["seed"], r["regime"], r["question_id"])


def sort_records(records: Iterable[Record]) -> list[Record]:
    """Records in canonical order (arrival order across workers is not fixed)."""
    return sorted(records, key=record_order)


def cells_of(records: Iterable[Record]) -> dict[tuple[str, int, str, str], list[Record]]:
    """Records grouped by (policy, budget, regime, reader), keys in canonical order."""
    groups: dict[tuple[str, int, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(r["policy"], r["budget"], r["regime"], r["reader"])].append(r)
    return {k: groups[k] for k in sorted(groups, key=lambda k: (policy_order(k[0]), -k[1], k[3], k[2]))}


def _fmt(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def cell_rows(records: Sequence[Record]) -> list[dict[str, str]]:
    """The rows of ``cells.csv`` as formatted strings."""
    rows = []
    for (policy, budget, regime, reader), recs in cells_of(records).items():
        fig = tally(recs)
        row = {
            "policy": policy,
            "budget": str(budget),
            "regime": regime,
            "reader": reader,
            "N": str(fig.N),
            "err": str(fig.err),
            "irr": str(fig.irr),
            "rec": str(fig.rec),
            "res": str(fig.res),
            "two_bin_share": _fmt(fig.two_bin_share),
            "irr_rate": _fmt(fig.irr_rate),
            "accuracy": _fmt(fig.accuracy),
            "gold_evicted_rate": _fmt(fig.gold_evicted_rate),
            "irr_share": _fmt(fig.share("irreversible")),
            "rec_share": _fmt(fig.share("recoverable")),
            "res_share": _fmt(fig.share("residual")),
            "negative_restore_gain": str(fig.negative_restore_gain),
            "excluded": str(fig.excluded),
        }
        rows.append(row)
    return rows


def render_cells_csv(records: Sequence[Record]) -> str:
    """``cells.csv`` as text."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CELL_COLUMNS + EXTRA_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(cell_rows(records))
    return buf.getvalue()


def render_records_jsonl(records: Iterable[Record]) -> str:
    """``records.jsonl`` as text, in canonical order."""
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in sort_records(records))


def _budget_label(budget: int) -> str:
    return f"{budget // 1000}k" if budget % 1000 == 0 else str(budget)


def render_cell_table(records: Sequence[Record], regime: str) -> str:
    """The per-cell table of one regime, in the paper's Table 1 layout (markdown)."""
    lines = [
        "| policy | budget | reader | N | err | irr | rec | res | two-bin | irr-rate | accuracy | gold evicted |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    previous = None
    for (policy, budget, reg, reader), recs in cells_of(records).items():
        if reg != regime:
            continue
        fig = tally(recs)
        name = policy if policy != previous else ""
        previous = policy
        lines.append(
            f"| {name} | {_budget_label(budget)} | {reader} | {fig.N} | {fig.err} | {fig.irr} | {fig.rec} | "
            f"{fig.res} | {_fmt(fig.two_bin_share, 2) or '-'} | {_fmt(fig.irr_rate, 2) or '-'} | "
            f"{_fmt(fig.accuracy, 2) or '-'} | {_fmt(fig.gold_evicted_rate, 2) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def record_exclusions(records: Sequence[Record]) -> dict[str, int]:
    """Excluded records by reason (model failures), over all cells."""
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        if r["excluded"] is not None:
            counts[str(r["excluded"])] += 1
    return dict(sorted(counts.items()))


def render_report_md(records: Sequence[Record], info: RunInfo) -> str:
    """``report.md`` as text."""
    ds = info.dataset
    out = ["# Restore-counterfactual audit", ""]
    sha = ds.get("sha256", "unknown")
    official = ds.get("official")
    out.append(f"Dataset sha256: `{sha}`" + (" (the official LongMemEval-S file)" if official else
                                              " (not the official longmemeval_s_cleaned.json)" if official is False else ""))
    out.append("")
    if ds:
        out.append(
            f"Questions in the file: {ds.get('questions', '?')}; audited: {ds.get('audited', '?')}."
        )
        out.append("")
    settings = info.settings
    if settings:
        out += ["## Settings", "", "| setting | value |", "|---|---|"]
        for key in sorted(settings):
            out.append(f"| {key} | {json.dumps(settings[key])} |")
        out.append("")
    out += ["## Exclusions", "", "| reason | questions |", "|---|---:|"]
    if info.exclusions:
        for reason, count in sorted(info.exclusions.items()):
            out.append(f"| {reason} | {count} |")
    else:
        out.append("| none | 0 |")
    failed = record_exclusions(records)
    out += ["", "Records excluded from a cell's decomposition (failed model calls, never scored as wrong):", ""]
    out += ["| reason | records |", "|---|---:|"]
    if failed:
        for reason, count in failed.items():
            out.append(f"| {reason} | {count} |")
    else:
        out.append("| none | 0 |")
    out += [
        "",
        "## Regime (b): top-k retrieval",
        "",
        "Oracle-answerable denominator N (random pooled over its seeds); errors binned irreversible, "
        "recoverable or residual; two-bin = irr / (irr + rec); irr-rate = irr / N.",
        "",
        render_cell_table(records, "b"),
        "## Regime (a): forced surviving gold (construct reference, rec = 0 by construction)",
        "",
        render_cell_table(records, "a"),
    ]
    return "\n".join(out)


@dataclass(frozen=True)
class ReportFiles:
    """Where the report was written."""

    out_dir: Path
    records: Path
    cells: Path
    report: Path
    summary: Path


def summary_json(records: Sequence[Record], info: RunInfo) -> dict[str, Any]:
    """``summary.json``: the run section plus counts."""
    bins = {b: sum(1 for r in records if r["bin"] == b) for b in BINS}
    return {
        "run": info.to_json(),
        "counts": {
            "records": len(records),
            "cells": len(cells_of(records)),
            "questions": len({r["question_id"] for r in records}),
            "excluded_records": sum(1 for r in records if r["excluded"] is not None),
            "bins": bins,
        },
        "record_exclusions": record_exclusions(records),
    }


def write_report(records: Sequence[Record], info: RunInfo, out_dir: str | Path) -> ReportFiles:
    """Write every report file into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ordered = sort_records(records)
    files = ReportFiles(out, out / "records.jsonl", out / "cells.csv", out / "report.md", out / "summary.json")
    files.records.write_text(render_records_jsonl(ordered), encoding="utf-8")
    files.cells.write_text(render_cells_csv(ordered), encoding="utf-8")
    files.report.write_text(render_report_md(ordered, info), encoding="utf-8")
    files.summary.write_text(
        json.dumps(summary_json(ordered, info), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return files


def read_records(path: str | Path) -> list[Record]:
    """Read ``records.jsonl``; a record with a missing field is a one-line error."""
    records = []
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RecordsError(f"{p}: cannot read: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RecordsError(f"{p}: line {n}: not JSON: {exc.msg}") from None
        if not isinstance(rec, dict):
            raise RecordsError(f"{p}: line {n}: not a JSON object")
        missing = [k for k in REQUIRED_RECORD_KEYS if k not in rec]
        if missing:
            who = rec.get("question_id", "?")
            raise RecordsError(f"{p}: line {n} (question {who!r}): missing field {missing[0]!r}")
        records.append(rec)
    if not records:
        raise RecordsError(f"{p}: no records")
    return records


def terminal_lines(records: Sequence[Record]) -> list[str]:
    """A short summary for the end of the pytest run: regime (b) per cell."""
    lines = [f"{'policy':<16}{'budget':>8}{'N':>7}{'err':>6}{'irr':>6}{'rec':>6}{'res':>6}{'two-bin':>9}{'acc':>7}"]
    for (policy, budget, regime, _reader), recs in cells_of(records).items():
        if regime != "b":
            continue
        fig: CellFigures = tally(recs)
        lines.append(
            f"{policy:<16}{_budget_label(budget):>8}{fig.N:>7}{fig.err:>6}{fig.irr:>6}{fig.rec:>6}{fig.res:>6}"
            f"{_fmt(fig.two_bin_share, 2) or '-':>9}{_fmt(fig.accuracy, 2) or '-':>7}"
        )
    return lines
