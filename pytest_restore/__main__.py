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
from dataclasses import replace
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
    from pytest_restore.report.inputs import (
        RecordsError,
        check_run_info,
        read_records,
        read_run_info,
    )
    from pytest_restore.report.writer import write_report
    from pytest_restore.stats.families import default_families

    if Path(args.out).exists() and not Path(args.out).is_dir():
        print(f"error: --out {args.out}: is a file, not a directory", file=sys.stderr)
        return 2
    try:
        records = read_records(args.records)
        # no conftest.py here: the built-in families and those of installed packages' entry points
        info = replace(read_run_info(args.records), families=tuple(default_families().values()))
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
    parser.add_argument("--bootstrap", type=int, default=10_000, help="resamples (default: 10000)")
    parser.add_argument("--bootstrap-seed", type=int, default=None, help="seed (default: the report's)")
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
        comparison = compare_dirs(
            args.old, args.new, resamples=args.bootstrap,
            seed=DEFAULT_SEED if args.bootstrap_seed is None else args.bootstrap_seed,
        )
    except (CompareError, RecordsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write(comparison, args.out)
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
