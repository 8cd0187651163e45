"""Command line: ``python -m pytest_restore <subcommand>``.

Each subcommand is one :class:`~pytest_restore.cli.subcommand.Subcommand` in ``pytest_restore/cli/``
(its arguments, its work returning the exit code; ``batch`` and ``data`` have actions). To add one,
declare it there and list it in ``SUBCOMMANDS``.

Every argument is checked before any work: a bad value is argparse's
one-line usage error, exit 2; an output directory that cannot be written
(:func:`pytest_restore.exits.out_dir_problem`, before the work, or a full disk
during it) is one line and exit 74 (``exits.IO_ERROR``). ``compare
--fail-if-worse`` keeps 1 for "worse". ``run`` keeps pytest's codes, as the
plugin's run does (4: a wrong option).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from pytest_restore.cli.audit import GENERATE, RUN
from pytest_restore.cli.batch import BATCH
from pytest_restore.cli.data import DATA
from pytest_restore.cli.reports import COMPARE, REPORT, SHOW
from pytest_restore.cli.subcommand import Subcommand

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: The subcommands, in the order ``--help`` lists them.
SUBCOMMANDS: tuple[Subcommand, ...] = (RUN, GENERATE, REPORT, SHOW, COMPARE, BATCH, DATA)


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
    for subcommand in SUBCOMMANDS:
        subcommand.add_to(subparsers)
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
