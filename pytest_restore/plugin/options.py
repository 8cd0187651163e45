"""The ``--restore-*`` options and ini keys (declared in ``run/options.py``), read into a run's
:class:`~pytest_restore.run.options.RawOptions`, and whether a run asked for the audit.

Imported whenever pytest loads the plugin, so it imports nothing but pytest and
the options' declarations: an unrelated test session pays for these two only.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path
from typing import Any, Literal

import pytest

from pytest_restore.run.options import OPTIONS, RawOptions, small_data

#: The item property a grid item's message to the controller travels in (``run/message.py``; from xdist workers too).
MESSAGE_PROPERTY = "restore_message"

#: The plugin's session object, once the run is an audit (see :func:`requested`).
#: (a ``plugin.session.Role``; typed ``Any`` so that this module names nothing of plugin/session.py,
#: which imports it)
SESSION_KEY: pytest.StashKey[Any] = pytest.StashKey()
#: This run's id on an xdist controller, handed to the workers (their shared cells' directory).
RUN_KEY = pytest.StashKey[str]()
#: Set when xdist was asked for ``-n auto`` (the plugin may then keep a small grid on one worker).
AUTO_KEY = pytest.StashKey[bool]()
#: Set when ``-n auto`` was answered with no worker: a small audit runs in one process.
ONE_PROCESS_KEY = pytest.StashKey[bool]()

def _ini_type(kind: str) -> Literal["string", "int", "float"]:
    """The ini type pytest checks, where this pytest knows it."""
    if kind == "int" and _PYTEST_TYPED_INI:
        return "int"
    if kind == "float" and _PYTEST_TYPED_INI:
        return "float"
    return "string"


_PYTEST_TYPED_INI = tuple(int(x) for x in pytest.__version__.split(".")[:2]) >= (8, 4)


def _dest(name: str) -> str:
    return "restore_" + name.replace("-", "_")


def add_options(parser: pytest.Parser) -> None:
    """The ``--restore-*`` options, each also an ini key ``restore_*``."""
    group = parser.getgroup("restore", "restore-counterfactual audit")
    for name, default, help_, kind in OPTIONS:
        group.addoption(f"--restore-{name}", dest=_dest(name), default=None, help=f"{help_} [{default or 'unset'}]")
        ini_kind = _ini_type(kind)
        # A typed key's default is None when unset, so "unset" is told apart from a value.
        parser.addini(_dest(name), help=help_, type=ini_kind, default=default if ini_kind == "string" else None)
    group.addoption(
        "--restore",
        dest="restore",
        action="store_true",
        default=False,
        help="run the audit: the grid the package ships joins the session (on the embedded default "
        "unless other --restore-* options say otherwise)",
    )
    group.addoption(
        "--restore-dry-run",
        dest="restore_dry_run",
        action="store_true",
        default=False,
        help="print the model calls the grid needs (and what is cached) with token estimates, then stop",
    )
    group.addoption(
        "--restore-ablations",
        dest="restore_ablations",
        action="store_true",
        default=None,
        help="run the restore-tightness ablations on the regime-(b) irreversible cases",
    )
    parser.addini("restore_ablations", help="run the restore-tightness ablations", type="bool", default=False)
    group.addoption(
        "--restore-batch",
        dest="restore_batch",
        action="store_true",
        default=None,
        help="run the real models' calls as OpenAI Batch API rounds (half price, within 24 h), never live",
    )
    parser.addini("restore_batch", help="run the real models' calls through the Batch API", type="bool", default=False)
    group.addoption(
        "--restore-price",
        dest="restore_price",
        action="append",
        default=None,
        metavar="MODEL=IN,OUT",
        help="price of a model in USD per million input and output tokens, for the dry run's estimate "
        "(repeatable; gpt-4o-mini, gpt-5.4-mini and gpt-5.5 are built in)",
    )
    parser.addini("restore_price", help="model prices for the dry run, one MODEL=IN,OUT a line", type="linelist")


def requested(config: pytest.Config) -> bool:
    """Whether the command line or the ini file asks for the audit (any ``--restore-*`` option or
    ``restore_*`` key): then the plugin starts at configure time and checks every value first."""
    for name, _default, _help, _kind in OPTIONS:
        if config.getoption(_dest(name)) is not None:
            return True
    if config.getoption("restore") or config.getoption("restore_dry_run") or config.getoption("restore_ablations") is not None:
        return True
    if config.getoption("restore_batch") is not None:
        return True
    if config.getoption("restore_price") is not None:
        return True
    for name, default, _help, kind in OPTIONS:
        try:
            value = config.getini(_dest(name))
        except pytest.UsageError:  # a malformed value: the settings name it
            return True
        unset = default if _ini_type(kind) == "string" else None
        if value != unset:
            return True
    return bool(config.getini("restore_ablations") or config.getini("restore_price") or config.getini("restore_batch"))


def new_run_id() -> str:
    """A fresh run id (the name of the directory xdist workers share cells in)."""
    return uuid.uuid4().hex


#: Test files looked at, at most, to tell whether the command's paths hold an audit grid.
_GRID_SCAN_LIMIT = 200


def paths_hold_a_grid(config: pytest.Config) -> bool:
    """Whether the test paths given on the command line hold a test asking for ``restore_cell``.

    Read from the files' text before collection, so that ``-n auto`` can run a
    small grid in one process from the start instead of paying for workers
    that would each prepare the data again. Only explicit paths are looked at,
    and at most ``_GRID_SCAN_LIMIT`` test files.
    """
    seen = 0
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(path.rglob("test_*.py")) + sorted(path.rglob("*_test.py"))
        else:
            continue
        for file in candidates:
            seen += 1
            if seen > _GRID_SCAN_LIMIT:
                return False
            if _asks_for_restore_cell(file):
                return True
    return False


def _asks_for_restore_cell(file: Path) -> bool:
    """Whether a test module defines a test taking the ``restore_cell`` fixture (a mention in a
    string, as in this project's own tests of the plugin, does not count)."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
        if "restore_cell" not in text:
            return False
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return False
    scopes = [tree.body] + [node.body for node in tree.body if isinstance(node, ast.ClassDef)]
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test")
        and any(arg.arg == "restore_cell" for arg in node.args.args)
        for body in scopes
        for node in body
    )


def small_audit(config: pytest.Config) -> bool:
    """Whether the command asks for the audit of small data (read before configure): a
    ``--restore-*`` option or ``restore_*`` key, or test paths that hold the grid."""
    if not requested(config) and not paths_hold_a_grid(config):
        return False
    values = {}
    for name in ("data", "embedded-questions"):
        value = config.getoption(_dest(name))
        if value is None:
            try:
                value = config.getini(_dest(name))
            except pytest.UsageError:
                return False  # the settings report it
        values[name] = "" if value is None else str(value).strip()
    try:
        questions = int(values["embedded-questions"] or "100")
    except ValueError:
        return False
    return small_data(values["data"] or None, questions)


def raw_options(config: pytest.Config) -> RawOptions:
    """Every option's text, from the command line, else the ini file, else its default, and where it came from."""
    values: dict[str, str] = {}
    where: dict[str, str] = {}  # where each value came from, for error messages
    given: set[str] = set()
    for name, default, _help, _kind in OPTIONS:
        value = config.getoption(_dest(name))
        where[name] = f"--restore-{name}"
        if value is not None:
            given.add(name)
        if value is None:
            where[name] = f"ini key {_dest(name)}" + (f" ({config.inipath.name})" if config.inipath else "")
            try:
                value = config.getini(_dest(name))
            except pytest.UsageError as err:  # pytest's own type check: name the key
                message = str(err).removeprefix(f"{config.inipath}: ")
                raise pytest.UsageError(f"{where[name]}: {message}") from None
            if value is None:
                value, where[name] = default, f"--restore-{name}"
        values[name] = str(value).strip()
    prices, price_where = config.getoption("restore_price"), "--restore-price"
    if prices is None:
        prices, price_where = config.getini("restore_price"), "ini key restore_price"
    return RawOptions(
        values,
        where,
        prices=tuple(prices),
        price_where=price_where,
        dry_run=bool(config.getoption("restore_dry_run")),
        ablations=bool(_flag(config, "restore_ablations")),
        batch=bool(_flag(config, "restore_batch")),
        given=frozenset(given),
    )


def _flag(config: pytest.Config, dest: str) -> bool:
    """A flag given on the command line, else its ini key."""
    given = config.getoption(dest)
    return bool(given if given is not None else config.getini(dest))
