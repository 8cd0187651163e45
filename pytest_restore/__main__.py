"""Command line: ``python -m pytest_restore <subcommand>``.

Each subcommand is two functions: ``_add_<name>(subparsers)`` declares its
arguments and sets ``func``; ``_run_<name>(args)`` does the work and returns the
exit code. To add one, write both and list the ``_add_`` function in
``_SUBCOMMANDS``.

Every argument is checked before any work: a bad value is argparse's
one-line usage error, exit 2; an output directory that cannot be written
(:func:`pytest_restore.exits.out_dir_problem`, before the work, or a full disk
during it) is one line and exit 74 (``exits.IO_ERROR``). ``compare
--fail-if-worse`` keeps 1 for "worse".
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from pytest_restore.exits import IO_ERROR, os_cause, out_dir_problem

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
    parser.set_defaults(func=_run_report)


def _run_report(args: argparse.Namespace) -> int:
    from pytest_restore.report.inputs import (
        RecordsError,
        check_run_info,
        read_records,
        read_run_info,
    )
    from pytest_restore.report.writer import write_report
    from pytest_restore.stats.families import default_families

    problem = out_dir_problem(args.out, "--out")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return IO_ERROR
    try:
        records = read_records(args.records)
        # no conftest.py here: the built-in families and those of installed packages' entry points
        info = replace(read_run_info(args.records), families=tuple(default_families().values()))
        check_run_info(records, info, args.records)
    except RecordsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # records that read well but contradict each other
        print(f"error: {args.records}: {err}", file=sys.stderr)
        return 2
    try:
        files = write_report(records, info, args.out)
    except OSError as err:  # a full disk, or the directory made read-only since the check
        return _io_error("--out", args.out, err)
    print(f"report: {len(records)} records -> {files.out_dir}")
    for failure in files.failures:
        print(f"expectation not met: {failure}")
    for line in files.untestable:
        print(f"not testable at this N: {line}")
    return 0


# --------------------------------------------------------------------------- compare


def _add_compare(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare two report directories cell by cell, with paired bootstrap intervals",
        description=(
            "Per cell present in both runs: the two-bin share, irreversible rate, recoverable rate and "
            "accuracy of OLD and NEW and the paired difference NEW - OLD on the questions both share, with "
            "its question-cluster bootstrap interval. Prints markdown and writes compare.md and "
            "compare.json. With --fail-if-worse, exits 1 when a cell got worse beyond the threshold."
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
    parser.add_argument("--bootstrap", type=at_least(100), default=10_000, help="resamples, at least 100 (default: 10000)")
    parser.add_argument("--bootstrap-seed", type=at_least(0), default=None, help="seed (default: the report's)")
    parser.set_defaults(func=_run_compare)


def _run_compare(args: argparse.Namespace) -> int:
    from pytest_restore.bootstrap import DEFAULT_SEED
    from pytest_restore.compare import (
        CompareError,
        compare_dirs,
        parse_threshold,
        render_markdown,
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
        )
    except (CompareError, RecordsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        write(comparison, args.out)
    except OSError as err:
        return _io_error("--out", args.out, err)
    print(render_markdown(comparison), end="")
    print(f"compare: {len(comparison.cells)} cells -> {args.out}/compare.md, compare.json")
    worse = worse_cells(comparison, thresholds)
    for line in worse:
        print(f"worse: {line}")
    return 1 if worse else 0


# --------------------------------------------------------------------------- entry point

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None], ...] = (
    _add_generate,
    _add_report,
    _add_compare,
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
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
