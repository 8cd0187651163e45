"""Command line: ``python -m pytest_restore <subcommand>``.

Each subcommand is two functions: ``_add_<name>(subparsers)`` declares its
arguments and sets ``func``; ``_run_<name>(args)`` does the work and returns the
exit code. To add one, write both and list the ``_add_`` function in
``_SUBCOMMANDS``.

Every argument is checked before any work: a bad value is argparse's
one-line usage error, exit 2; an output directory that cannot be written
(:func:`pytest_restore.exits.out_dir_problem`, before the work, or a full disk
during it) is one line and exit 74 (``exits.IO_ERROR``). ``compare
--fail-if-worse`` keeps 1 for "worse". ``run`` keeps pytest's codes, as the
plugin's run does (4: a wrong option).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_restore import jsonl
from pytest_restore.exits import IO_ERROR, os_cause, out_dir_problem, out_file_problem

if TYPE_CHECKING:
    from pytest_restore.models.batch import LedgerEntry

__all__ = ["build_parser", "main"]


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number no smaller than ``minimum`` (else a usage error, exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is below the minimum of {minimum}")
        return value

    parse.__name__ = "whole number"  # how argparse names the type in its messages
    return parse


def _io_error(label: str, where: object, err: OSError) -> int:
    """Say a file-system failure in one line (the place and the cause); the I/O exit code."""
    print(f"error: {label} {where}: {os_cause(err)}", file=sys.stderr)
    return IO_ERROR

# --------------------------------------------------------------------------- generate


def _add_run(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the audit without pytest: the same grid, checks and report as 'pytest --restore'",
        usage="%(prog)s [--workers N] [--restore-* options]",
        description=(
            "Run the audit the --restore-* options ask for, with no pytest session: the checks before the "
            "grid (calibration gate, batch rounds), the grid's cells (in this process, or in --workers "
            "processes), the checks after it and the report. The records, cells.csv, report.md and exit "
            "status are those of 'pytest benches/ -n auto' with the same options. No conftest.py is read: "
            "policies, rankers and providers come built in or from installed packages' entry points."
        ),
    )
    parser.add_argument(
        "--workers", default="1", metavar="N",
        help="processes that run the grid's cells: a number, or 'auto' (one per CPU, one for small data as "
        "pytest -n auto; default: 1, this process)",
    )
    # the --restore-* options follow, as pytest takes them: read by the run core's own parser (main)
    parser.set_defaults(func=_run_run, options=[])


def _run_run(args: argparse.Namespace) -> int:

    from pytest_restore.plugin.finish import terminal_summary
    from pytest_restore.run.local import PlainTerminal, run_audit
    from pytest_restore.run.options import OptionsError, parse_args
    from pytest_restore.run.settings import SettingsError

    # a wrong option is pytest's usage error: one line, exit 4 (pytest.ExitCode.USAGE_ERROR)
    usage_error = 4
    given = [a for a in args.options if a != "--"]
    if args.workers != "auto" and not (args.workers.isdigit() and int(args.workers) >= 1):
        print(f"ERROR: --workers: {args.workers!r} is neither a number of processes nor 'auto'", file=sys.stderr)
        return usage_error
    workers = None if args.workers == "auto" else int(args.workers)
    try:
        raw, ignored = parse_args(given)
    except OptionsError as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return usage_error
    if ignored:
        print(f"ERROR: run: not --restore-* options: {' '.join(ignored)}", file=sys.stderr)
        return usage_error
    terminal = PlainTerminal()
    try:
        session, status = run_audit(raw, workers, terminal, DEFAULT_CACHE.parent)
    except SettingsError as err:
        print(f"ERROR: {err}", file=sys.stderr)
        return usage_error
    try:
        terminal_summary(terminal, session.settings, session.outcome)
    finally:
        session.close()
    return status


def _add_generate(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="write a deterministic synthetic LongMemEval-S file",
        description=(
            "Write a synthetic dataset in the LongMemEval-S layout. The same arguments "
            "always give a byte-identical file."
        ),
    )
    parser.add_argument("--questions", type=at_least(0), required=True, help="number of questions (500 = full mix)")
    parser.add_argument("--seed", type=at_least(0), required=True, help="random seed")
    parser.add_argument("--out", required=True, help="output JSON file")
    parser.add_argument(
        "--tokens-per-history", type=at_least(1000), default=102_000,
        help="target o200k tokens per history (default: 102000)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from pytest_restore.synthetic.generator import generate, history_tokens, write_dataset

    out = Path(args.out)
    problem = out_dir_problem(out.parent, "--out") if not out.is_dir() else f"--out {out}: is a directory, not a file"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return IO_ERROR
    started = time.perf_counter()
    step = max(1, args.questions // 10)

    def progress(done: int, total: int) -> None:
        if not args.quiet and (done % step == 0 or done == total):
            print(f"generate: {done}/{total} questions ({time.perf_counter() - started:.1f}s)",
                  file=sys.stderr)

    records = generate(args.questions, args.seed, args.tokens_per_history, progress=progress)
    if not args.quiet:
        print(f"generate: writing {args.out}", file=sys.stderr)
    try:
        digest = write_dataset(records, args.out)
    except OSError as err:
        return _io_error("--out", args.out, err)
    sizes = [history_tokens(r) for r in records]
    mean = sum(sizes) / len(sizes) if sizes else 0.0
    print(
        f"generate: {len(records)} questions, mean history {mean:,.0f} tokens, "
        f"{time.perf_counter() - started:.1f}s, sha256 {digest} -> {args.out}"
    )
    return 0


# --------------------------------------------------------------------------- report


def _add_report(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "report",
        help="rebuild the report from saved records, without any model call",
        description=(
            "Write the session report (records.jsonl, cells.csv, hypotheses.json, report.md, "
            "summary.json, figure.png, figure.svg) from a saved records.jsonl. The run section "
            "(settings, dataset, exclusions) is read from the summary.json beside RECORDS; "
            "without one the report has no run settings and the statistics use their defaults. "
            "Given the files of a session, the output is byte-identical to what the session wrote."
        ),
    )
    parser.add_argument("records", metavar="RECORDS.jsonl", help="saved per-question records")
    parser.add_argument("--out", required=True, help="directory to write the report into")
    parser.add_argument(
        "--data", metavar="FILE", default=None,
        help="the data file the run read, for report.html's texts (default: the one summary.json names)",
    )
    parser.set_defaults(func=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from pytest_restore.report.inputs import (
        RecordsError,
        check_run_info,
        read_records,
        read_run_info,
    )
    from pytest_restore.report.writer import write_report
    from pytest_restore.run.checks import read_check
    from pytest_restore.run.staging import report_dir_problem, staging_dir, swap_into_place
    from pytest_restore.stats.families import default_families

    # replaced whole, as a session's report directory is: another run's files (its calibration.json)
    # never stay beside this one's, and a directory holding something else is refused
    problem = report_dir_problem(args.out, "--out")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return IO_ERROR
    try:
        records = read_records(args.records)
        # no conftest.py here: the built-in families and those of installed packages' entry points
        info = replace(read_run_info(args.records, read_check), families=tuple(default_families().values()))
        check_run_info(records, info, args.records)
    except RecordsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # records that read well but contradict each other
        print(f"error: {args.records}: {err}", file=sys.stderr)
        return 2
    staging: Path | None = None
    try:
        staging = staging_dir(Path(args.out))
        files = write_report(records, info, staging, data_file=args.data)
        swap_into_place(staging, Path(args.out))
    except OSError as err:  # a full disk, or the directory made read-only since the check
        return _io_error("--out", args.out, err)
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)  # swapped in, it is gone; not swapped in, it goes
    print(f"report: {len(records)} records -> {args.out}")
    for failure in files.failures:
        print(f"expectation not met: {failure}")
    for line in files.untestable:
        print(f"not testable at this N: {line}")
    return 0


# --------------------------------------------------------------------------- show


def _add_show(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "show",
        help="print one question's story: its gold, their eviction, what each condition's reader saw",
        description=(
            "Print why a question landed in its bin, from a report directory's records and the data "
            "file the run read (no model call): the question, the reference, the gold units and when "
            "each was evicted, what each condition's reader saw (gold, forced, ranked), the answers, "
            "the verdicts and the bin. Without --cell: one line per cell and how to see one whole; with --cell: "
            "that cell whole, every memory its readers saw and every held memory citing gold in full."
        ),
    )
    parser.add_argument("question_id", metavar="QUESTION_ID", help="the question's id")
    parser.add_argument(
        "--report-dir", default="restore-report",
        help="the run's report directory, with records.jsonl and summary.json (default: restore-report)",
    )
    parser.add_argument(
        "--cell", default=None,
        help="one cell: POLICY-BUDGET as the grid names it (fifo-80k), or POLICY-BUDGET-REGIME (fifo-80k-b)",
    )
    parser.add_argument(
        "--data", metavar="FILE", default=None,
        help="the data file the run read (default: the one summary.json names; the embedded default is regenerated)",
    )
    parser.add_argument(
        "--full", action="store_true",
        help="without --cell: every cell's story whole, not one line per cell (with --cell the cell is always whole)",
    )
    parser.add_argument("--width", type=at_least(40), default=100, help="line width (default: 100)")
    parser.set_defaults(func=_run_show)


def _run_show(args: argparse.Namespace) -> int:
    from pytest_restore.report.inputs import RecordsError, read_records, read_run_info
    from pytest_restore.report.story import (
        StoryError,
        open_data,
        render_story_summary,
        render_story_text,
        select,
        tell,
    )

    path = Path(args.report_dir) / "records.jsonl"
    try:
        records = read_records(path)
        info = read_run_info(path)
        chosen = select(records, args.question_id, args.cell)
        dataset = open_data(info, args.data)
    except (RecordsError, StoryError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    question = next((q for q in dataset.questions if q.question_id == args.question_id), None)
    if question is None:
        print(f"error: {dataset.path}: no question {args.question_id!r} (not the run's data?)", file=sys.stderr)
        return 2
    story = tell(chosen, question)
    if args.cell is None and not args.full:
        sys.stdout.write(render_story_summary(story, width=args.width))
    else:
        sys.stdout.write(render_story_text(story, width=args.width, full=True))
    return 0


# --------------------------------------------------------------------------- compare


def _add_compare(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare two report directories cell by cell, with paired bootstrap intervals",
        description=(
            "Per cell present in both runs: the two-bin share, irreversible rate, recoverable rate and "
            "accuracy of OLD and NEW and the paired difference NEW - OLD on the questions both share, with "
            "its question-cluster bootstrap interval. Prints each difference in a table of 100 columns and writes "
            "the whole comparison to compare.md and compare.json. With --fail-if-worse, exits 1 when a cell got worse beyond the threshold."
        ),
    )
    parser.add_argument("old", metavar="OLD", help="report directory of the baseline run")
    parser.add_argument("new", metavar="NEW", help="report directory of the run to check")
    parser.add_argument("--out", default="restore-compare", help="where compare.md and compare.json go")
    parser.add_argument(
        "--fail-if-worse",
        action="append",
        default=[],
        metavar="FIGURE=THRESHOLD",
        help="exit 1 when a cell's FIGURE (two_bin_share, irr_rate, rec_rate, accuracy) got worse by more "
        "than THRESHOLD (repeatable); worse is up, except for accuracy",
    )
    parser.add_argument(
        "--allow-unlike",
        action="store_true",
        help="compare runs whose dataset, question set or reader differ (refused otherwise)",
    )
    parser.add_argument("--bootstrap", type=at_least(100), default=10_000, help="resamples, at least 100 (default: 10000)")
    parser.add_argument("--bootstrap-seed", type=at_least(0), default=None, help="seed (default: the report's)")
    parser.set_defaults(func=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from pytest_restore.bootstrap import DEFAULT_SEED
    from pytest_restore.compare import (
        CompareError,
        compare_dirs,
        gate_problem,
        parse_threshold,
        render_terminal,
        worse_cells,
        write,
    )
    from pytest_restore.report.inputs import RecordsError

    try:
        thresholds = [parse_threshold(t) for t in args.fail_if_worse]
    except CompareError as err:  # checked before any work, as argparse checks the rest
        print(f"error: {err}", file=sys.stderr)
        return 2
    problem = out_dir_problem(args.out, "--out")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return IO_ERROR
    try:
        comparison = compare_dirs(
            args.old, args.new, resamples=args.bootstrap,
            seed=DEFAULT_SEED if args.bootstrap_seed is None else args.bootstrap_seed,
            allow_unlike=args.allow_unlike,
        )
    except (CompareError, RecordsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        write(comparison, args.out)
    except OSError as err:
        return _io_error("--out", args.out, err)
    print("\n".join(render_terminal(comparison)))
    print(
        f"compare: {len(comparison.cells)} cells, {comparison.compared_questions} questions compared "
        f"-> {args.out}/compare.md (OLD, NEW and each interval), compare.json"
    )
    for label, names in (("only in OLD", comparison.only_old), ("only in NEW", comparison.only_new)):
        if names:
            print(f"not compared: {len(names)} cells {label}: {', '.join(names)}")
    problem = gate_problem(comparison, thresholds)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    worse = worse_cells(comparison, thresholds)
    for line in worse:
        print(f"worse: {line}")
    return 1 if worse else 0


# --------------------------------------------------------------------------- batch

#: Where a run keeps its response cache unless ``--restore-cache`` names one (pytest's cache, from the project root).
DEFAULT_CACHE = Path(".pytest_cache") / "d" / "restore" / "responses"


def _add_batch(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "batch",
        help="the batches of a response cache: status, cancel, export a round, import an output file",
        description=(
            "Batches of --restore-batch runs, recorded beside the response cache: show them (status), cancel "
            "them (cancel; a later run harvests what they answered), write a round's batch input file without "
            "sending it (export, for vLLM's run_batch or another program), or read a batch output file into "
            "the cache (import), checked exactly as live replies are."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="<action>")
    actions.required = True
    for name, help_ in (("status", "list the batches and exported files"), ("cancel", "cancel running batches")):
        sub = actions.add_parser(name, help=help_)
        sub.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"response cache directory (default: {DEFAULT_CACHE})")
        if name == "cancel":
            sub.add_argument("ids", nargs="*", metavar="BATCH_ID", help="batches to cancel (default: every running one)")
    export = actions.add_parser(
        "export",
        help="write a round's batch input file (nothing is sent)",
        description=(
            "Runs the grid's dry run (the --restore-* options after --; pytest's own arguments there are "
            "ignored, and no ini file or conftest.py is read) and writes the round's requests that the cache "
            "does not hold as an OpenAI batch input file. Rounds go in order: scorer (only with "
            "llm-importance), writer (only with a memory system that writes with a model), reader, judge; "
            "each needs the previous one imported."
        ),
    )
    export.add_argument("--round", required=True, choices=EXPORT_ROUNDS, help="the round to write")
    export.add_argument("--out", required=True, help="the input file to write (JSONL)")
    export.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the grid's --restore-* options")
    imported = actions.add_parser(
        "import",
        help="read a batch output file into the response cache",
        description=(
            "Reads an OpenAI batch output (or error) file, as vLLM's run_batch writes it, into the response "
            "cache. A line whose custom_id was never exported, or whose request differs from the exported one, "
            "is refused and counted; a reply is checked as a live one is (a judge's must be a verdict)."
        ),
    )
    imported.add_argument("file", metavar="FILE", help="the output JSONL")
    imported.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"response cache directory (default: {DEFAULT_CACHE})")
    imported.add_argument(
        "--input", default=None, help="the input file the output was made from (default: the exported files)"
    )
    parser.set_defaults(func=_run_batch)


#: The rounds ``batch export`` writes: run/settings.py's ``BATCH_ROUNDS`` (a test holds them equal),
#: spelled here so the parser is built without importing the run core.
EXPORT_ROUNDS = ("scorer", "writer", "reader", "judge")


def _run_batch(args: argparse.Namespace) -> int:
    action: Callable[[argparse.Namespace], int] = {
        "status": _batch_status,
        "cancel": _batch_cancel,
        "export": _batch_export,
        "import": _batch_import,
    }[args.action]
    return action(args)


def _ledger_entries(cache: str) -> list[LedgerEntry] | None:
    """The ledger's entries of ``cache``, or ``None`` after saying in one line why they cannot be read."""
    from pytest_restore.models.batch import Ledger, LedgerError

    try:
        return Ledger(cache).entries()
    except LedgerError as err:
        print(f"error: {err}", file=sys.stderr)
        return None


def _batch_status(args: argparse.Namespace) -> int:
    from pytest_restore.models.batch import BatchClient, BatchError, with_counts

    entries = _ledger_entries(args.cache)
    if entries is None:
        return 2
    if not entries:
        print(f"batch: no batch recorded in {args.cache}")
        return 0
    clients: dict[str, BatchClient] = {}
    for entry in entries:
        if entry.kind == "export":
            print(f"{entry.name}  {entry.round:<10} {entry.model}  exported {entry.requests:,} requests -> {entry.input_path}")
            continue
        if entry.state == "submitting":  # a create cut short: the next run looks for its batch first
            print(
                f"{entry.name}  {entry.round:<10} {entry.model}  submitting: a batch of {entry.requests:,} requests "
                f"may exist at the provider (metadata restore_intent={entry.intent}); the next run looks for it"
            )
            continue
        if entry.state == "pending":
            try:
                client = clients.setdefault(entry.base_url, BatchClient(entry.base_url or None))
                entry = with_counts(entry, client.retrieve(entry.batch_id))
            except BatchError as err:
                print(f"{entry.batch_id}: {err}", file=sys.stderr)
        counts = entry.counts
        failures = "; ".join(f"{n} x {cause}" for cause, n in sorted(entry.failures.items())) or "none"
        print(
            f"{entry.batch_id or entry.name}  {entry.round:<10} {entry.model}  {entry.state} ({entry.status or 'not yet seen'}): "
            f"{counts.get('completed', 0):,}/{counts.get('total', entry.requests):,} completed, "
            f"{counts.get('failed', 0):,} failed; failures: {failures}"
        )
    for client in clients.values():
        client.close()
    return 0


def _batch_cancel(args: argparse.Namespace) -> int:
    from pytest_restore.models.batch import BatchClient, BatchError

    entries = _ledger_entries(args.cache)
    if entries is None:
        return 2
    pending = [e for e in entries if e.kind == "batch" and e.state == "pending"]
    if args.ids:
        unknown = sorted(set(args.ids) - {e.batch_id for e in pending})
        if unknown:
            print(f"error: {unknown[0]} is not a running batch of {args.cache}", file=sys.stderr)
            return 2
        pending = [e for e in pending if e.batch_id in args.ids]
    if not pending:
        print(f"batch: nothing running in {args.cache}")
        return 0
    failed = 0
    for entry in pending:
        client = BatchClient(entry.base_url or None)
        try:
            batch = client.cancel(entry.batch_id)
        except BatchError as err:
            print(f"error: {err}", file=sys.stderr)
            failed += 1
            continue
        finally:
            client.close()
        # still pending in the ledger: the next run harvests what it answered before the cancel
        print(f"batch: {entry.batch_id} {batch.get('status')} (what it answered is kept by the next run)")
    return 1 if failed else 0


def _batch_export(args: argparse.Namespace) -> int:
    import dataclasses
    import uuid

    from pytest_restore.run.options import OptionsError, parse_args
    from pytest_restore.run.parts import RunParts
    from pytest_restore.run.phases import dry_run_phase
    from pytest_restore.run.plan import build_plan, check_before_work, default_registries
    from pytest_restore.run.settings import SettingsError

    # before the dry run: an --out that cannot be a file is said in one line (as every --out is)
    problem = out_file_problem(Path(args.out), "batch export --out")
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return IO_ERROR
    given = [a for a in args.pytest_args if a != "--"] if args.pytest_args[:1] == ["--"] else list(args.pytest_args)
    try:
        raw, ignored = parse_args(given)
    except OptionsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if ignored:
        print(f"batch export: not the audit's options, ignored: {' '.join(ignored)}", file=sys.stderr)
    raw = dataclasses.replace(
        raw, values={**raw.values, "batch-export": args.out, "batch-round": args.round}, dry_run=True
    )

    def say(line: str) -> None:
        print(f"restore: {line}", file=sys.stderr)

    parts = None
    try:
        # no conftest.py or ini file here: the built-in registries and those of installed packages' entry points
        plan = build_plan(raw, default_registries(), uuid.uuid4().hex, DEFAULT_CACHE.parent, say)
        check_before_work(plan)
        parts = RunParts(plan, say)
        dry = dry_run_phase(parts)
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        if parts is not None:
            parts.close()
    for line in dry.lines:
        print(line)
    if not dry.written:
        print(f"error: batch export: nothing written to {args.out} (the 'batch export' line above says why)", file=sys.stderr)
        return 1
    return 0


def _batch_import(args: argparse.Namespace) -> int:
    from pytest_restore.models.batch import (
        BatchError,
        BatchItem,
        BatchRunner,
        Ledger,
        LedgerError,
        body_digest,
    )
    from pytest_restore.models.openai_chat import failure_cause
    from pytest_restore.models.providers import VALIDATORS

    path = Path(args.file)
    if not path.is_file():
        print(f"error: {path}: no such file", file=sys.stderr)
        return 2
    ledger = Ledger(args.cache)
    items: dict[str, BatchItem] = {}
    try:
        exports = [e for e in ledger.entries() if e.kind == "export"]
        for entry in exports:
            items.update(ledger.items(entry))
    except LedgerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not items:
        print(f"error: {args.cache}: no exported batch file recorded (run `batch export` first)", file=sys.stderr)
        return 2
    # the requests that produced the output, as the other program read them
    sources = [Path(args.input)] if args.input else [Path(e.input_path) for e in exports if Path(e.input_path).is_file()]
    sent: dict[str, str] = {}
    n = 0
    for source in sources:
        try:
            for n, text in jsonl.numbered_lines(jsonl.read_text(source)):
                line = json.loads(text)
                sent[str(line["custom_id"])] = body_digest(line["body"])
        except jsonl.JsonlError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"error: {source} line {n}: not a batch input line ({err})", file=sys.stderr)
            return 2
    try:
        output = jsonl.read_text(path)
    except jsonl.JsonlError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {path}: {os_cause(err)}", file=sys.stderr)
        return 2
    lines: list[tuple[str, str]] = []
    refused: Counter[str] = Counter()
    for n, text in jsonl.numbered_lines(output):
        try:
            custom_id = str(json.loads(text).get("custom_id"))
        except (ValueError, AttributeError):
            custom_id = ""
        item = items.get(custom_id)
        if item is not None and custom_id in sent and sent[custom_id] != body_digest(item.body()):
            refused["request differs from the exported one"] += 1
            continue
        lines.append((f"{path} line {n}", text))
    runner = BatchRunner(args.cache, VALIDATORS)
    try:
        results, more = runner.judge_lines(lines, items)
    except BatchError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    refused.update(more)
    ok = sum(1 for r in results.values() if r.ok)
    failures: Counter[str] = Counter(failure_cause(r.error or "") for r in results.values() if not r.ok)
    print(f"import: {ok:,} answers checked and cached from {path}")
    for cause, n in failures.most_common():
        print(f"import: {n:,} failed: {cause}")
    for reason, n in refused.most_common():
        print(f"import: {n:,} lines refused: {reason}")
    if failures or refused:
        print(
            f"import: incomplete: {sum(failures.values()):,} failed, {sum(refused.values()):,} refused",
            file=sys.stderr,
        )
        return 1
    return 0


# --------------------------------------------------------------------------- data


def _add_data(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from pytest_restore.data.catalogue import DATA_DIR_ENV, catalogue

    parser = subparsers.add_parser(
        "data",
        help="the public datasets the audit knows: list them, fetch one (checked against its sha256)",
        description=(
            "The datasets --restore-data=NAME and --restore-errata=NAME name: where each comes from, its license, "
            "size and sha256, and whether it is here (list); a download from the official location, or --from a "
            "mirror or a local copy, checked against the sha256 before it is kept (fetch). Exit codes of fetch: "
            "0 stored (or already here), 65 refused (wrong size or sha256; nothing kept), 69 not reached or not "
            "served (offline, a 404, a download cut short: the same command resumes it), 74 the data directory "
            "cannot be written, 2 a bad argument."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="<action>")
    actions.required = True
    where = f"where datasets are stored (default: ${DATA_DIR_ENV}, else ~/.cache/pytest-restore/data)"
    listing = actions.add_parser("list", help="the known datasets, and whether each is here")
    listing.add_argument("--dir", default=None, help=where)
    listing.add_argument("--verify", action="store_true", help="hash the files that are here against their sha256")
    fetching = actions.add_parser(
        "fetch", help="download a dataset from its official location (or --from), check it, store it"
    )
    fetching.add_argument("name", metavar="NAME", choices=sorted(catalogue()), help=", ".join(catalogue()))
    fetching.add_argument(
        "--from", dest="source", metavar="URL_OR_PATH", default=None,
        help="a mirror's URL or a local copy of the same file (still checked against the sha256)",
    )
    fetching.add_argument("--dir", default=None, help=where)
    fetching.add_argument(
        "--timeout", type=at_least(1), default=60, help="seconds to wait for the server at each step (default: 60)"
    )
    parser.set_defaults(func=_run_data)


def _run_data(args: argparse.Namespace) -> int:
    from pytest_restore.data.catalogue import (
        FetchError,
        catalogue,
        data_dir,
        fetch,
        say_stderr,
        state,
    )

    directory = data_dir(args.dir)
    known = catalogue()
    if args.action == "list":
        print(f"data directory: {directory}")
        for entry in known.values():
            print(
                f"\n{entry.name}: {entry.title}\n"
                f"  file:    {entry.filename}, {entry.size:,} bytes, sha256 {entry.sha256}\n"
                f"  from:    {entry.url}\n"
                f"  about:   {entry.page}\n"
                f"  license: {entry.license}\n"
                f"  here:    {state(entry, directory, verify=args.verify)}\n"
                f"  use:     {entry.option}={entry.name}  (get it: python -m pytest_restore data fetch {entry.name})"
            )
        return 0
    entry = known[args.name]
    try:
        done = fetch(entry, directory, source=args.source, say=say_stderr, timeout=float(args.timeout))
    except FetchError as err:
        print(f"error: data fetch {entry.name}: {err}", file=sys.stderr)
        return err.code
    if not done.downloaded:
        print(f"data: {entry.name} is already here, sha256 checked: {done.path}")
    else:
        resumed = f", resumed at byte {done.resumed_from:,}" if done.resumed_from else ""
        print(f"data: {entry.name} fetched, {entry.size:,} bytes, sha256 checked{resumed}: {done.path}")
    print(f"data: use it with {entry.option}={entry.name}")
    return 0


# --------------------------------------------------------------------------- entry point

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_run,
    _add_generate,
    _add_report,
    _add_show,
    _add_compare,
    _add_batch,
    _add_data,
)


def _prog() -> str:
    """How the user called us: the ``pytest-restore`` console script or ``python -m pytest_restore``."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.startswith("pytest-restore") else "python -m pytest_restore"


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m pytest_restore`` argument parser with every subcommand."""
    from pytest_restore import __version__

    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="pytest-restore tools: restore-counterfactual audits of agent-memory eviction.",
    )
    parser.add_argument("--version", action="version", version=f"pytest-restore {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<subcommand>")
    subparsers.required = True
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; return its exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # only ``run`` takes options of its own kind (--restore-*), wherever they stand
        if args.command != "run":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.options = extra
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
