"""``data``: the public datasets the audit knows (list), and one fetched and checked against its sha256 (fetch)."""

from __future__ import annotations

import argparse

from pytest_restore.cli.subcommand import Subcommand, at_least, refuse

__all__ = ["DATA"]


def _dir_argument(parser: argparse.ArgumentParser) -> None:
    from pytest_restore.data.catalogue import DATA_DIR_ENV

    where = f"where datasets are stored (default: ${DATA_DIR_ENV}, else ~/.cache/pytest-restore/data)"
    parser.add_argument("--dir", default=None, help=where)


def _list_arguments(parser: argparse.ArgumentParser) -> None:
    _dir_argument(parser)
    parser.add_argument("--verify", action="store_true", help="hash the files that are here against their sha256")


def _list(args: argparse.Namespace) -> int:
    """the known datasets, and whether each is here"""
    from pytest_restore.data.catalogue import catalogue, data_dir, state

    directory = data_dir(args.dir)
    print(f"data directory: {directory}")
    for entry in catalogue().values():
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


def _fetch_arguments(parser: argparse.ArgumentParser) -> None:
    from pytest_restore.data.catalogue import catalogue

    parser.add_argument("name", metavar="NAME", choices=sorted(catalogue()), help=", ".join(catalogue()))
    parser.add_argument(
        "--from", dest="source", metavar="URL_OR_PATH", default=None,
        help="a mirror's URL or a local copy of the same file (still checked against the sha256)",
    )
    _dir_argument(parser)
    parser.add_argument(
        "--timeout", type=at_least(1), default=60, help="seconds to wait for the server at each step (default: 60)"
    )


def _fetch(args: argparse.Namespace) -> int:
    """download a dataset from its official location (or --from), check it, store it"""
    from pytest_restore.data.catalogue import FetchError, catalogue, data_dir, fetch, say_stderr

    entry = catalogue()[args.name]
    try:
        done = fetch(entry, data_dir(args.dir), source=args.source, say=say_stderr, timeout=float(args.timeout))
    except FetchError as err:
        return refuse(f"data fetch {entry.name}: {err}", err.code)
    if not done.downloaded:
        print(f"data: {entry.name} is already here, sha256 checked: {done.path}")
    else:
        resumed = f", resumed at byte {done.resumed_from:,}" if done.resumed_from else ""
        print(f"data: {entry.name} fetched, {entry.size:,} bytes, sha256 checked{resumed}: {done.path}")
    print(f"data: use it with {entry.option}={entry.name}")
    return 0


DATA = Subcommand(
    "data",
    None,
    actions=(Subcommand("list", _list, _list_arguments), Subcommand("fetch", _fetch, _fetch_arguments)),
    doc="""the public datasets the audit knows: list them, fetch one (checked against its sha256)

    The datasets --restore-data=NAME and --restore-errata=NAME name: where each comes from, its
    license, size and sha256, and whether it is here (list); a download from the official location, or
    --from a mirror or a local copy, checked against the sha256 before it is kept (fetch). Exit codes of
    fetch: 0 stored (or already here), 65 refused (wrong size or sha256; nothing kept), 69 not reached or
    not served (offline, a 404, a download cut short: the same command resumes it), 74 the data
    directory cannot be written, 2 a bad argument.
    """,
)
