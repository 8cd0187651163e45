"""``run`` (the audit without pytest) and ``generate`` (a synthetic LongMemEval-S file)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pytest_restore.cli.subcommand import DEFAULT_CACHE, Subcommand, at_least, io_error, refuse
from pytest_restore.exits import IO_ERROR, out_dir_problem

__all__ = ["GENERATE", "RUN"]


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", default="1", metavar="N",
        help="processes that run the grid's cells: a number, or 'auto' (one per CPU, one for small data as "
        "pytest -n auto; default: 1, this process)",
    )
    # the --restore-* options follow, as pytest takes them: read by the run core's own parser (main)
    parser.set_defaults(options=[])


def _usage_error(problem: object) -> int:
    """A wrong option, said as pytest says its usage errors: one ``ERROR:`` line, exit 4 (``ExitCode.USAGE_ERROR``)."""
    print(f"ERROR: {problem}", file=sys.stderr)
    return 4


def _run(args: argparse.Namespace) -> int:
    """run the audit without pytest: the same grid, checks and report as 'pytest --restore'

    Run the audit the --restore-* options ask for, with no pytest session: the checks before the
    grid (calibration gate, batch rounds), the grid's cells (in this process, or in --workers
    processes), the checks after it and the report. The records, cells.csv, report.md and exit
    status are those of 'pytest benches/ -n auto' with the same options. No conftest.py is read:
    policies, rankers and providers come built in or from installed packages' entry points.
    """
    from pytest_restore.plugin.finish import terminal_summary
    from pytest_restore.run.local import PlainTerminal, run_audit
    from pytest_restore.run.options import OptionsError, parse_args
    from pytest_restore.run.settings import SettingsError

    given = [a for a in args.options if a != "--"]
    if args.workers != "auto" and not (args.workers.isdigit() and int(args.workers) >= 1):
        return _usage_error(f"--workers: {args.workers!r} is neither a number of processes nor 'auto'")
    workers = None if args.workers == "auto" else int(args.workers)
    try:
        raw, ignored = parse_args(given)
    except OptionsError as err:
        return _usage_error(err)
    if ignored:
        return _usage_error(f"run: not --restore-* options: {' '.join(ignored)}")
    terminal = PlainTerminal()
    try:
        session, status = run_audit(raw, workers, terminal, DEFAULT_CACHE.parent)
    except SettingsError as err:
        return _usage_error(err)
    try:
        terminal_summary(terminal, session.settings, session.outcome)
    finally:
        session.close()
    return status


RUN = Subcommand("run", _run, _run_arguments, usage="%(prog)s [--workers N] [--restore-* options]")


def _generate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--questions", type=at_least(0), required=True, help="number of questions (500 = full mix)")
    parser.add_argument("--seed", type=at_least(0), required=True, help="random seed")
    parser.add_argument("--out", required=True, help="output JSON file")
    parser.add_argument(
        "--tokens-per-history", type=at_least(1000), default=102_000,
        help="target o200k tokens per history (default: 102000)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _generate(args: argparse.Namespace) -> int:
    """write a deterministic synthetic LongMemEval-S file

    Write a synthetic dataset in the LongMemEval-S layout. The same arguments always give a
    byte-identical file.
    """
    from pytest_restore.synthetic.generator import generate, history_tokens, write_dataset

    out = Path(args.out)
    problem = out_dir_problem(out.parent, "--out") if not out.is_dir() else f"--out {out}: is a directory, not a file"
    if problem:
        return refuse(problem, IO_ERROR)
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
        return io_error("--out", args.out, err)
    sizes = [history_tokens(r) for r in records]
    mean = sum(sizes) / len(sizes) if sizes else 0.0
    print(
        f"generate: {len(records)} questions, mean history {mean:,.0f} tokens, "
        f"{time.perf_counter() - started:.1f}s, sha256 {digest} -> {args.out}"
    )
    return 0


GENERATE = Subcommand("generate", _generate, _generate_arguments)
