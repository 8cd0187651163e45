"""report.md's sections for the run's checks outside the grid, rendered from their results.

Each check (``run/checks.py``: grid coverage, real model calls, calibration
gate, judge audit, batch rounds, embeddings) renders its section with one of
these functions, from the figures ``summary.json`` keeps, so ``python -m
pytest_restore report`` renders the same sections from ``summary.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_restore.audit.calibration import GATE_REGIME, PROBE_KINDS, CalibrationResult
from pytest_restore.audit.judge_audit import JudgeAuditResult
from pytest_restore.models.prompts import DONT_KNOW
from pytest_restore.report.inputs import md_text, num
from pytest_restore.stats.results import budget_label

#: What the checks' tables show for a rate that could not be measured.
NA = "n/a"


def _at_least(value: float | None, threshold: float) -> bool:
    return value is not None and value >= threshold


def render_grid_md(cells: Mapping[str, Sequence[str]]) -> str:
    """report.md's grid coverage: the cells that ran and those that did not."""
    out = ["## Grid coverage", ""]
    out.append(f"Cells run ({len(cells['ran'])}): {', '.join(cells['ran']) or 'none'}.")
    out.append("")
    if cells["not_run"]:
        out.append(f"Cells not run ({len(cells['not_run'])}): {', '.join(cells['not_run'])}.")
    else:
        out.append("Every cell of the configured grid ran.")
    return "\n".join(out)


def replicas_set_aside(details: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The replicas the models set aside, by address: why (the least reason, for a stable text) and by which
    models, in one line each: one replica serves a run's models (reader, judge, scorer) at one address."""
    by_where: dict[str, list[tuple[str, str]]] = {}
    for name, detail in sorted(details.items()):
        for where, why in detail.get("set_aside", {}).items():
            by_where.setdefault(where, []).append((why, name))
    return {
        where: f"{min(why for why, _ in seen)} ({', '.join(name for _, name in seen)})"
        for where, seen in sorted(by_where.items())
    }


def render_real_calls_md(details: Mapping[str, Mapping[str, Any]]) -> str:
    """report.md's real-model section: what was sent, the concurrency reached, failures by cause."""
    out = ["## Real model calls", "", "| model | decoding sent | concurrency reached | failed calls |", "|---|---|---:|---|"]
    for name, d in sorted(details.items()):
        decoding = ", ".join(f"{k}: {v}" for k, v in d.get("decoding", {}).items())
        failures = "; ".join(f"{n} x {cause}" for cause, n in sorted(d.get("failures", {}).items())) or "none"
        out.append(f"| {md_text(name)} | {decoding} | {d.get('concurrency', 0)} | {failures.replace('|', '/')} |")
    aside = replicas_set_aside(details)
    if aside:
        out += ["", "Replicas set aside (their calls went to the other replicas):", ""]
        out += [f"- {md_text(why)}" for why in aside.values()]
    return "\n".join(out)


def _counts(counts: Mapping[str, int]) -> str:
    """``kind n, kind n`` (a table cell), or ``none``."""
    return ", ".join(f"{kind} {n}" for kind, n in counts.items() if n) or "none"


def render_memory_systems_md(cells: Sequence[Mapping[str, Any]]) -> str:
    """report.md's account of the memory systems' cells: stores, memories held, the systems' own calls, what
    failed and the answers they rejected, by cause; and the cells whose every answer of a kind was rejected."""
    out = [
        "## Memory systems",
        "",
        "What each memory system did building its cells' stores: the turns it was fed, the memories it held at the",
        "histories' ends, the model calls it made by kind (a model-written system's writer, and a memory library's",
        "own calls through the run's gateway, go through the run's model layer: cached, priced and in the run's",
        "usage as well as here), the calls that got no answer and the",
        "answers it received but could not use, by cause. A turn whose answer was rejected is cited by no memory:",
        "what it held is lost to the system, in the irreversible bin. A cell where no answer of a kind of call was",
        "used fails the run.",
        "",
        (
            "| cell | stores | turns fed | memories held | tokens held | model calls | failed calls | answers rejected "
            "| events | evicted, as it says |"
        ),
        "|---|---:|---:|---:|---:|---|---|---|---|---:|",
    ]
    emptied = []
    for cell in cells:
        f = cell["figures"]
        rejected = "; ".join(
            f"{kind}: " + ", ".join(f"{n} {cause}" for cause, n in causes.items()) for kind, causes in f["rejected"].items()
        ) or "none"
        out.append(
            f"| {md_text(cell['cell'])} | {f['stores']:,} | {f['units']:,} | {f['held']:,} | {f.get('held_tokens', 0):,} | {_counts(f['calls'])} | "
            f"{_counts(f['failed'])} | {rejected.replace('|', '/')} | {_counts(f['events'])} | {f['evicted'] if f['evicted'] or f['events'] else '-'} |"
        )
        emptied += [f"{md_text(cell['cell'])} ({line})" for line in unused_calls(f)]
    if emptied:
        out += ["", f"**No answer used** in {'; '.join(emptied)}."]
    out += library_lines(cells)
    out += unbound_budgets(cells)
    return "\n".join(out)


def library_lines(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """report.md's paragraph comparing the memory libraries' cells: the version each ran, its model calls per
    turn fed by kind and its ingest seconds per turn (empty: no library ran)."""
    rows = []
    for cell in cells:
        f = cell["figures"]
        if not f.get("library"):
            continue
        turns = max(int(f["units"]), 1)
        per_turn = ", ".join(f"{kind} {n / turns:.2f}" for kind, n in f["calls"].items()) or "none"
        rows.append(f"- {cell['cell']}: {f['library']}; model calls per turn: {per_turn}; {f['ingest_seconds'] / turns:.3f} s to ingest a turn")
    return ["", "**Memory libraries.**", "", *rows] if rows else []


def unbound_budgets(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """report.md's paragraph of :func:`unbound_notes`, a bullet each (empty: every budget bound)."""
    notes = unbound_notes(cells)
    return ["", "**Budgets that never bound.**", "", *(f"- {note}" for note in notes)] if notes else []


def unbound_notes(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """A note for each memory system whose tighter budgets held what its loosest did (the same memories and
    tokens over the same stores): those budgets never bound, and their cells repeat the loosest's (report.md,
    report.html and the terminal say it: the cells' rows read the same)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for cell in cells:
        groups.setdefault((str(cell["policy"]), str(cell.get("reader", "")), str(cell.get("ranker", ""))), []).append(cell)
    notes = []
    for (policy, _, _), group in groups.items():
        loose, *tighter = sorted(group, key=lambda c: -int(c.get("budget", 0)))
        held = [loose["figures"][k] for k in ("stores", "held", "held_tokens")]
        same = [c for c in tighter if [c["figures"][k] for k in ("stores", "held", "held_tokens")] == held]
        if same and held[2]:
            labels = [budget_label(int(c["budget"])) for c in same]
            at = " and ".join([", ".join(labels[:-1]), labels[-1]] if len(labels) > 1 else labels)
            notes.append(
                f"{policy} held the same at {at} as at {budget_label(int(loose['budget']))} ({held[1]:,} memories, "
                f"{held[2]:,} tokens over {held[0]:,} stores): "
                f"{'that budget' if len(same) == 1 else 'those budgets'} never bound its stores, so "
                f"{'its cell repeats' if len(same) == 1 else 'their cells repeat'} {budget_label(int(loose['budget']))}'s."
            )
    return notes


def unused_calls(figures: Mapping[str, Any]) -> list[str]:
    """Each kind of call of a memory system's figures none of whose answers it used: ``every one of its N
    fact extraction calls rejected or failed`` (empty: every kind gave the system something)."""
    out = []
    for kind, n in figures["calls"].items():
        lost = sum(figures["rejected"].get(kind, {}).values()) + figures["failed"].get(kind, 0)
        if n and lost >= n:
            out.append(f"every one of its {n} {kind} calls rejected or failed")
    return out


def _lenient_rows(r: CalibrationResult) -> list[str]:
    """One row per wrong probe kind: its acceptance rate against the limit (none for a result without them)."""
    rows = []
    for kind, said, expected in PROBE_KINDS:
        rate = r.acceptance(kind)
        if expected or not r.probe_asked.get(kind):
            continue
        ok = "pass" if rate is not None and rate <= r.max_wrong_acceptance else "**fail**"
        rows.append(
            f"| judge probes: {said.strip(chr(39) + chr(34))} accepted | {num(rate, missing=NA)} | "
            f"{r.probe_accepted.get(kind, 0)} of {r.probe_asked[kind]} | <= {r.max_wrong_acceptance:.2f} | {ok} |"
        )
    return rows


def render_calibration_md(r: CalibrationResult) -> str:
    """A small table for report.md, then the decision and its reasons."""
    ok = {True: "pass", False: "**fail**"}
    consistency_ok = (
        r.judge_consistency is not None and r.judge_consistency >= r.min_consistency
    )
    negative_ok = (
        r.negative_gain_rate is not None
        and r.negative_gain_rate <= r.max_negative_gain
    )
    lines = [
        (
            f"Calibration on {r.questions} questions (seed {r.seed}); "
            f"cell `{r.policy}` @ {r.budget}, regime ({GATE_REGIME})."
        ),
        "",
        "| check | value | counts | threshold | result |",
        "|---|---:|---|---:|---|",
        (
            f"| judge repeat self-consistency | {num(r.judge_consistency, missing=NA)} | "
            f"{r.judge_consistent} of {r.judge_items} items agree over "
            f"1 + {r.repeats} gradings; {r.judge_not_a_verdict} not a verdict, "
            f"{r.judge_failed_calls} failed calls | "
            f">= {r.min_consistency:.2f} | {ok[consistency_ok]} |"
        ),
        (
            f"| judge probes: references graded CORRECT | {num(r.probe_reference_rate, missing=NA)} | "
            f"{r.probe_reference_correct} of {r.probe_reference} | "
            f">= {r.min_probe_rate:.2f} | {ok[_at_least(r.probe_reference_rate, r.min_probe_rate)]} |"
        ),
        (
            f"| judge probes: wrong answers graded INCORRECT | {num(r.probe_wrong_rate, missing=NA)} | "
            f"{r.probe_wrong_incorrect} of {r.probe_wrong} ({r.probe_dont_know_incorrect} of "
            f"{r.probe_dont_know} {DONT_KNOW!r}); {r.probe_unreadable} unreadable | "
            f">= {r.min_probe_rate:.2f} | {ok[_at_least(r.probe_wrong_rate, r.min_probe_rate)]} |"
        ),
        *_lenient_rows(r),
        (
            f"| oracle-answerable rate | {num(r.oracle_answerable_rate, missing=NA)} | "
            f"{r.oracle_correct} of {r.oracle_graded}; {r.oracle_failed} failed calls | "
            f"reported | {'n/a' if r.oracle_answerable_rate is None else 'ok'} |"
        ),
        (
            f"| negative-restore-gain rate | {num(r.negative_gain_rate, missing=NA)} | "
            f"{r.negative_restore_gain} of {r.policy_correct} policy-correct records; "
            f"{r.cell_excluded} excluded | <= {r.max_negative_gain:.2f} | "
            f"{ok[negative_ok]} |"
        ),
        "",
    ]
    if r.passed:
        lines.append("Calibration gate: **passed**.")
    else:
        lines.append("Calibration gate: **failed**:")
        lines.append("")
        lines.extend(f"- {reason}" for reason in r.reasons)
    return "\n".join(lines) + "\n"


def render_judge_audit_md(r: JudgeAuditResult) -> str:
    """A short section for report.md: the figures and the 2x2 table."""
    t = r.overall.table
    lines = [
        (
            f"Second judge `{r.second_judge}` re-graded a stratified sample of "
            f"{r.sampled} of {r.population} distinct graded answers of "
            f"`{r.first_judge}` (seed {r.seed}); {r.api_errors + r.not_a_verdict} "
            f"excluded ({r.api_errors} failed calls, {r.not_a_verdict} replies not a "
            "verdict)."
        ),
        "",
        "| answers | graded | agreement | Cohen's kappa |",
        "|---|---:|---:|---:|",
    ]
    rows = [("all", r.overall)] + [(s, a) for s, a in sorted(r.by_source.items())]
    for label, a in rows:
        lines.append(f"| {label} | {a.graded} | {num(a.agreement, missing=NA)} | {num(a.kappa, missing=NA)} |")
    lines += [
        "",
        "| first \\ second | CORRECT | INCORRECT |",
        "|---|---:|---:|",
        f"| CORRECT | {t[0][0]} | {t[0][1]} |",
        f"| INCORRECT | {t[1][0]} | {t[1][1]} |",
    ]
    notes = [f"- {label} answers: {a.kappa_note}." for label, a in rows if a.kappa_note]
    if notes:
        lines += ["", "Kappa notes:", "", *notes]
    return "\n".join(lines) + "\n"


def render_batch_md(result: Mapping[str, Any]) -> str:
    """report.md's section on the grid's batch rounds (the gate's and the judge audit's rounds are in the ledger)."""
    rounds: Sequence[Mapping[str, Any]] = result["rounds"]
    out = [
        "## Batch rounds",
        "",
        (
            "The grid's calls were answered by the Batch API before the grid ran from the response cache "
            "(`python -m pytest_restore batch status` lists every batch)."
        ),
        "",
        "| round | requests | already cached | batches new / attached | answered | failed | input tokens | output tokens |",
        "|---|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in rounds:
        failed = "; ".join(f"{n} x {cause}" for cause, n in r["failed"].items()) or "none"
        batches = f"{', '.join(r['created']) or '-'} / {', '.join(r['attached']) or '-'}"
        out.append(
            f"| {r['round']} | {r['requests']:,} | {r['cached']:,} | {batches} | {r['answered']:,} | "
            f"{failed.replace('|', '/')} | {r['input_tokens']:,} | {r['output_tokens']:,} |"
        )
    return "\n".join(out)


def render_embeddings_md(result: Mapping[str, Mapping[str, Any]]) -> str:
    """report.md's account of the run's embeddings: per embedder, texts, what the run sent, truncations, storage."""
    lines = [
        "## Embeddings",
        "",
        (
            "Each distinct text the dense and hybrid rankers read (the questions and the units' contents), embedded "
            "once per model and stored as int8 rows with a scale; a text over the model's input limit keeps its "
            "first 90% of the limit in o200k tokens."
        ),
        "",
        "| embedder | distinct texts | embedded this run | truncated | requests | tokens | dimensions | stored bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result.items():
        lines.append(
            f"| {md_text(name)} | {row['distinct_texts']:,} | {row['embedded_this_run']:,} | {row['truncated']:,} | "
            f"{row['requests']:,} | {row['tokens']:,} | {row['dimensions']} | {row['store_bytes']:,} |"
        )
    for name, row in result.items():
        if row.get("split"):  # a summary.json from before the figure existed has none
            lines += ["", (
                f"{md_text(name)}: {row['split']:,} requests took longer than the timeout and were sent again as two "
                "halves each (rather than whole), until the server answered in time."
            )]
    return "\n".join(lines) + "\n"
