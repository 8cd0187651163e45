"""``batch``: the batches of a response cache (status, cancel), a round's input file written without sending it
(export), an output file read into the cache (import)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_restore import jsonl
from pytest_restore.cli.subcommand import DEFAULT_CACHE, Subcommand, refuse
from pytest_restore.exits import IO_ERROR, os_cause, out_file_problem

if TYPE_CHECKING:
    from pytest_restore.models.batch import LedgerEntry

__all__ = ["BATCH", "EXPORT_ROUNDS"]

#: The rounds ``batch export`` writes: run/settings.py's ``BATCH_ROUNDS`` (a test holds them equal),
#: spelled here so the parser is built without importing the run core.
EXPORT_ROUNDS = ("scorer", "writer", "reader", "judge")


def _ledger_entries(cache: str) -> list[LedgerEntry] | None:
    """The ledger's entries of ``cache``, or ``None`` after saying in one line why they cannot be read."""
    from pytest_restore.models.batch import Ledger, LedgerError

    try:
        return Ledger(cache).entries()
    except LedgerError as err:
        refuse(err)
        return None


def _status(args: argparse.Namespace) -> int:
    """list the batches and exported files"""
    from pytest_restore.models.batch import BatchAPI, BatchError, with_counts
    from pytest_restore.models.providers import batch_client

    entries = _ledger_entries(args.cache)
    if entries is None:
        return 2
    if not entries:
        print(f"batch: no batch recorded in {args.cache}")
        return 0
    clients: dict[tuple[str, str], BatchAPI] = {}
    for entry in entries:
        if entry.kind == "export":
            print(f"{entry.name}  {entry.round:<10} {entry.model}  exported {entry.requests:,} requests -> {entry.input_path}")
            continue
        if entry.state == "submitting":  # a create cut short: the next run looks for its batch first
            print(
                f"{entry.name}  {entry.round:<10} {entry.model}  submitting: a batch of {entry.requests:,} requests "
                f"may exist at the provider ({batch_client(entry).intent_words(entry.intent, entry.requests)}); "
                "the next run looks for it"
            )
            continue
        if entry.state == "pending":
            try:
                client = clients.get((entry.provider, entry.base_url)) or batch_client(entry)
                clients[(entry.provider, entry.base_url)] = client
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


def _cancel(args: argparse.Namespace) -> int:
    """cancel running batches"""
    from pytest_restore.models.batch import BatchError
    from pytest_restore.models.providers import batch_client

    entries = _ledger_entries(args.cache)
    if entries is None:
        return 2
    pending = [e for e in entries if e.kind == "batch" and e.state == "pending"]
    if args.ids:
        unknown = sorted(set(args.ids) - {e.batch_id for e in pending})
        if unknown:
            return refuse(f"{unknown[0]} is not a running batch of {args.cache}")
        pending = [e for e in pending if e.batch_id in args.ids]
    if not pending:
        print(f"batch: nothing running in {args.cache}")
        return 0
    failed = 0
    for entry in pending:
        try:
            client = batch_client(entry)
        except BatchError as err:
            failed += refuse(err, 1)
            continue
        try:
            batch = client.cancel(entry.batch_id)
        except BatchError as err:
            failed += refuse(err, 1)
            continue
        finally:
            client.close()
        # still pending in the ledger: the next run harvests what it answered before the cancel
        print(f"batch: {entry.batch_id} {batch.get('status')} (what it answered is kept by the next run)")
    return 1 if failed else 0


def _export(args: argparse.Namespace) -> int:
    """write a round's batch input file (nothing is sent)

    Runs the grid's dry run (the --restore-* options after --; pytest's own arguments there are ignored,
    and no ini file or conftest.py is read) and writes the round's requests that the cache does not hold
    as a batch input file in their provider's format (OpenAI's, which vLLM's run_batch reads; an
    anthropic: model's as Message Batches requests). Rounds go in order: scorer (only with
    llm-importance), writer (only with a memory system that writes with a model), reader, judge; each
    needs the previous one imported.
    """
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
        return refuse(problem, IO_ERROR)
    given = [a for a in args.pytest_args if a != "--"] if args.pytest_args[:1] == ["--"] else list(args.pytest_args)
    try:
        raw, ignored = parse_args(given)
    except OptionsError as err:
        return refuse(err)
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
        return refuse(err)
    finally:
        if parts is not None:
            parts.close()
    for line in dry.lines:
        print(line)
    if not dry.written:
        return refuse(f"batch export: nothing written to {args.out} (the 'batch export' line above says why)", 1)
    return 0


def _import(args: argparse.Namespace) -> int:
    """read a batch output file into the response cache

    Reads a batch output file into the response cache, in the format of the export's provider: an
    OpenAI batch output (or error) file, as vLLM's run_batch writes it, or an Anthropic Message Batch's
    results. A line whose custom_id was never exported, or whose request differs from the exported one,
    is refused and counted; a reply is checked as a live one is (a judge's must be a verdict).
    """
    from pytest_restore.models.batch import (
        BatchAPI,
        BatchError,
        BatchItem,
        BatchRunner,
        Ledger,
        LedgerError,
        body_digest,
    )
    from pytest_restore.models.managed import failure_cause
    from pytest_restore.models.providers import VALIDATORS, batch_client

    path = Path(args.file)
    if not path.is_file():
        return refuse(f"{path}: no such file")
    ledger = Ledger(args.cache)
    # each exported request by the id its provider knows it by, with that provider's batch interface
    owners: dict[str, tuple[BatchAPI, BatchItem]] = {}
    clients: dict[str, BatchAPI] = {}
    try:
        exports = [e for e in ledger.entries() if e.kind == "export"]
        for entry in exports:
            client = clients.get(entry.provider) or clients.setdefault(entry.provider, batch_client(entry))
            owners.update({client.wire_id(cid): (client, item) for cid, item in ledger.items(entry).items()})
    except (LedgerError, BatchError) as err:
        return refuse(err)
    if not owners:
        return refuse(f"{args.cache}: no exported batch file recorded (run `batch export` first)")
    # the requests that produced the output, as the other program read them
    sources = [Path(args.input)] if args.input else [Path(e.input_path) for e in exports if Path(e.input_path).is_file()]
    sent: dict[str, str] = {}
    n = 0
    for source in sources:
        try:
            for n, text in jsonl.numbered_lines(jsonl.read_text(source)):
                line = json.loads(text)
                reading = owners[line["custom_id"]][0] if line["custom_id"] in owners else next(iter(clients.values()))
                sent[str(line["custom_id"])] = body_digest(reading.request_body(line))
        except jsonl.JsonlError as err:
            return refuse(err)
        except (OSError, ValueError, KeyError, TypeError) as err:
            return refuse(f"{source} line {n}: not a batch input line ({err})")
    try:
        output = jsonl.read_text(path)
    except jsonl.JsonlError as err:
        return refuse(err)
    except OSError as err:
        return refuse(f"{path}: {os_cause(err)}")
    lines: dict[str, list[tuple[str, str]]] = {}  # by provider: each reads its own format
    refused: Counter[str] = Counter()
    for n, text in jsonl.numbered_lines(output):
        try:
            custom_id = str(json.loads(text).get("custom_id"))
        except (ValueError, AttributeError):
            custom_id = ""
        owner = owners.get(custom_id)
        if owner is not None and custom_id in sent:
            exported = body_digest(owner[0].request_body(owner[0].request_line(owner[1])))
            if sent[custom_id] != exported:
                refused["request differs from the exported one"] += 1
                continue
        # a line of no exported request: any provider's reading refuses it
        reading = owner[0] if owner is not None else next(iter(clients.values()))
        lines.setdefault(reading.provider, []).append((f"{path} line {n}", text))
    results = {}
    for provider, found in lines.items():
        items = {item.custom_id: item for client, item in owners.values() if client.provider == provider}
        runner = BatchRunner(args.cache, VALIDATORS, client=clients[provider])
        try:
            part, more = runner.judge_lines(found, items)
        except BatchError as err:
            return refuse(err)
        results.update(part)
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


def _cache_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"response cache directory (default: {DEFAULT_CACHE})")


def _cancel_arguments(parser: argparse.ArgumentParser) -> None:
    _cache_argument(parser)
    parser.add_argument("ids", nargs="*", metavar="BATCH_ID", help="batches to cancel (default: every running one)")


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--round", required=True, choices=EXPORT_ROUNDS, help="the round to write")
    parser.add_argument("--out", required=True, help="the input file to write (JSONL)")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the grid's --restore-* options")


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="the output JSONL")
    _cache_argument(parser)
    parser.add_argument(
        "--input", default=None, help="the input file the output was made from (default: the exported files)"
    )


BATCH = Subcommand(
    "batch",
    None,
    actions=(
        Subcommand("status", _status, _cache_argument),
        Subcommand("cancel", _cancel, _cancel_arguments),
        Subcommand("export", _export, _export_arguments),
        Subcommand("import", _import, _import_arguments),
    ),
    doc="""the batches of a response cache: status, cancel, export a round, import an output file

    Batches of --restore-batch runs, recorded beside the response cache: show them (status), cancel
    them (cancel; a later run harvests what they answered), write a round's batch input file without
    sending it (export, for vLLM's run_batch or another program), or read a batch output file into the
    cache (import), checked exactly as live replies are.
    """,
)
