"""Command line: ``python -m pytest_restore <subcommand>``.

Each subcommand is two functions: ``_add_<name>(subparsers)`` declares its
arguments and sets ``func``; ``_run_<name>(args)`` does the work and returns the
exit code. To add one, write both and list the ``_add_`` function in
``_SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["build_parser", "main"]

# --------------------------------------------------------------------------- generate


def _add_generate(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "generate",
        help="write a deterministic synthetic LongMemEval-S file",
        description=(
            "Write a synthetic dataset in the LongMemEval-S layout. The same arguments "
            "always give a byte-identical file."
        ),
    )
    parser.add_argument("--questions", type=int, required=True, help="number of questions (500 = full mix)")
    parser.add_argument("--seed", type=int, required=True, help="random seed")
    parser.add_argument("--out", required=True, help="output JSON file")
    parser.add_argument(
        "--tokens-per-history", type=int, default=102_000,
        help="target o200k tokens per history (default: 102000)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=_run_generate)


def _run_generate(args: argparse.Namespace) -> int:
    from pytest_restore.synthetic.generator import generate, history_tokens, write_dataset

    if args.questions < 0:
        print(f"error: --questions must be >= 0, got {args.questions}", file=sys.stderr)
        return 2
    if args.tokens_per_history < 1000:
        print(f"error: --tokens-per-history must be >= 1000, got {args.tokens_per_history}",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    step = max(1, args.questions // 10)

    def progress(done: int, total: int) -> None:
        if not args.quiet and (done % step == 0 or done == total):
            print(f"generate: {done}/{total} questions ({time.perf_counter() - started:.1f}s)",
                  file=sys.stderr)

    records = generate(args.questions, args.seed, args.tokens_per_history, progress=progress)
    if not args.quiet:
        print(f"generate: writing {args.out}", file=sys.stderr)
    digest = write_dataset(records, args.out)
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
    parser.set_defaults(func=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from pytest_restore.report.writer import (
        RecordsError,
        check_run_info,
        read_records,
        read_run_info,
        write_report,
    )

    if Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"error: --out {args.out}: is a file, not a directory", file=sys.stderr)
        return 2
    try:
        records = read_records(args.records)
        info = read_run_info(args.records)
        check_run_info(records, info, args.records)
        files = write_report(records, info, args.out)
    except RecordsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # records that read well but contradict each other
        print(f"error: {args.records}: {err}", file=sys.stderr)
        return 2
    print(f"report: {len(records)} records -> {files.out_dir}")
    for failure in files.failures:
        print(f"expectation not met: {failure}")
    return 0


# --------------------------------------------------------------------------- entry point

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_generate,
    _add_report,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m pytest_restore`` argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="python -m pytest_restore",
        description="pytest-restore tools: restore-counterfactual audits of agent-memory eviction.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="<subcommand>")
    subparsers.required = True
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; return its exit code."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
