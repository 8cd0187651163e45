"""What every subcommand of ``python -m pytest_restore`` shares: its declaration and its one-line failures.

A subcommand is one :class:`Subcommand`: its name, a function declaring its arguments, and a function
doing the work and returning the exit code, whose docstring is what ``--help`` says (or, for ``batch``
and ``data``, its actions, each a :class:`Subcommand` of its own). ``__main__.py`` adds each to the parser the same
way, so no subcommand spells out the parser's plumbing again.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_restore.exits import IO_ERROR, os_cause

__all__ = ["DEFAULT_CACHE", "Subcommand", "at_least", "io_error", "refuse"]

#: Where a run keeps its response cache unless ``--restore-cache`` names one (pytest's cache, from the project root).
DEFAULT_CACHE = Path(".pytest_cache") / "d" / "restore" / "responses"


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A subcommand (or action) that takes no argument of its own."""


@dataclass(frozen=True)
class Subcommand:
    """One subcommand (or one action of a subcommand): its arguments and its work.

    What ``--help`` says of it is its work's docstring (``doc`` where actions do the work): the first
    line is the subcommand's line in the list, the paragraph after it (if any) its description.
    """

    name: str
    #: The work, given the parsed arguments; returns the exit code. ``None`` where ``actions`` do the work.
    run: Callable[[argparse.Namespace], int] | None
    #: Declares the arguments on the subcommand's own parser (defaults included).
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    usage: str | None = None
    #: The actions under it (``batch status``, ``data fetch``): one of them is required.
    actions: tuple[Subcommand, ...] = ()
    #: What ``--help`` says, where no ``run`` has a docstring to say it.
    doc: str | None = None

    def add_to(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Declare this subcommand, and its actions, on ``subparsers``."""
        text = inspect.cleandoc(self.doc or (self.run.__doc__ if self.run is not None else None) or "")
        line, _, description = text.partition("\n\n")
        parser = subparsers.add_parser(self.name, help=line, description=description or None, usage=self.usage)
        self.arguments(parser)
        if self.run is not None:
            parser.set_defaults(func=self.run)
        if self.actions:
            actions = parser.add_subparsers(dest="action", metavar="<action>")
            actions.required = True
            for action in self.actions:
                action.add_to(actions)


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


def refuse(problem: object, code: int = 2) -> int:
    """Say why a subcommand stops, in one ``error:`` line on stderr; ``code`` (2: a bad input)."""
    print(f"error: {problem}", file=sys.stderr)
    return code


def io_error(label: str, where: object, err: OSError) -> int:
    """Say a file-system failure in one line (the place and the cause); the I/O exit code."""
    return refuse(f"{label} {where}: {os_cause(err)}", IO_ERROR)
