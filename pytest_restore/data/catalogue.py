"""Data: the public datasets the audit knows, where each comes from, and fetching one into a cache directory.

``python -m pytest_restore data list`` shows :data:`CATALOGUE`; ``data fetch
NAME`` downloads an entry from its official location (or ``--from`` a mirror
or a local copy), checks its size and sha256, and stores it under
:func:`data_dir`; ``--restore-data=locomo`` then names the stored file
(:func:`resolve_name`).

A fetch writes ``FILE.part`` beside the final file and renames it only once
the size and sha256 are the catalogue's: a file that is refused (the wrong
size or checksum, from a server that sent all it meant to) leaves nothing
behind, while a download cut short (the connection closed before the length
the server announced) keeps its ``.part``, and the same command resumes it
with an HTTP range request (or restarts it, when the server ignores the
range). Nothing here imports beyond the standard library: the command line
lists and fetches without loading the audit.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_restore.exits import IO_ERROR, os_cause
from pytest_restore.user_cache import user_cache_dir

__all__ = [
    "CATALOGUE",
    "DATA_DIR_ENV",
    "DATA_ERROR",
    "UNAVAILABLE",
    "CatalogueEntry",
    "FetchError",
    "Fetched",
    "NotFetched",
    "catalogue",
    "data_dir",
    "fetch",
    "file_sha256",
    "resolve_name",
    "state",
]

#: The environment variable that sets where fetched datasets are stored (``--dir`` of ``data`` overrides it).
DATA_DIR_ENV = "PYTEST_RESTORE_DATA_DIR"
#: Exit code: the source could not be reached or did not serve the file (offline, DNS, refused, a 404,
#: a download cut short); ``EX_UNAVAILABLE`` of ``sysexits.h``.
UNAVAILABLE = 69
#: Exit code: the file was served whole but is not the catalogue's (its size or sha256 differ);
#: ``EX_DATAERR`` of ``sysexits.h``. Nothing is kept.
DATA_ERROR = 65

_CHUNK = 1 << 20


@dataclass(frozen=True)
class CatalogueEntry:
    """One public file the audit reads: where it comes from and what its bytes must be."""

    #: the name ``data fetch NAME`` and ``--restore-data=NAME`` take
    name: str
    #: what it is, in a few words
    title: str
    #: the file's name as its authors publish it (and as it is stored)
    filename: str
    #: where ``data fetch`` downloads it: the authors' own location, pinned to a revision
    url: str
    #: the page a person reads about it (the repository or dataset card)
    page: str
    #: its license, as its authors state it
    license: str
    #: its size in bytes
    size: int
    #: the sha256 of its bytes
    sha256: str
    #: the option that reads it: ``--restore-data`` or ``--restore-errata``
    option: str = "--restore-data"


#: The datasets the audit knows. Sizes and checksums are those of the files at the pinned revisions
#: (LoCoMo's as its authors' repository holds it; LongMemEval-S's from its Hugging Face LFS pointer).
CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        name="locomo",
        title="LoCoMo (Maharana et al., ACL 2024): 10 long conversations, 1,986 questions",
        filename="locomo10.json",
        url="https://raw.githubusercontent.com/snap-research/locomo/3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376/data/locomo10.json",
        page="https://github.com/snap-research/locomo",
        license="CC BY-NC 4.0 (non-commercial research use)",
        size=2_805_274,
        sha256="79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
    ),
    CatalogueEntry(
        name="longmemeval-s",
        title="LongMemEval-S, cleaned (Wu et al., ICLR 2025): 500 questions, ~115k-token histories",
        filename="longmemeval_s_cleaned.json",
        url=(
            "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/"
            "98d7416c24c778c2fee6e6f3006e7a073259d48f/longmemeval_s_cleaned.json"
        ),
        page="https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned",
        license="MIT (the dataset card's)",
        size=277_383_467,
        sha256="d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442",
    ),
    CatalogueEntry(
        name="locomo-errata",
        title="the LoCoMo Benchmark Audit's corrections to locomo10 (156 flawed questions)",
        filename="errors.json",
        url="https://raw.githubusercontent.com/dial481/locomo-audit/9493fb4b4af4256ed17a18e8fd0b3cfdeec29539/errors.json",
        page="https://github.com/dial481/locomo-audit",
        license="CC BY-NC 4.0 (LoCoMo's own)",
        size=150_552,
        sha256="f298ef46263fada20688a1d672be37d4f488c6da3b19343eea55ae5c1b5fe55e",
        option="--restore-errata",
    ),
)


def catalogue() -> dict[str, CatalogueEntry]:
    """The known datasets by name (read from :data:`CATALOGUE` at each call, so a test can replace it)."""
    return {entry.name: entry for entry in CATALOGUE}


def data_dir(given: str | os.PathLike[str] | None = None) -> Path:
    """Where fetched datasets are stored: ``given``, else ``$PYTEST_RESTORE_DATA_DIR``, else the user's
    cache directory (``$XDG_CACHE_HOME/pytest-restore/data``, ``~/.cache/pytest-restore/data``).

    One place per user, not per project: the files are large and the same for every project.
    """
    if given:
        return Path(given).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV]).expanduser()
    return user_cache_dir() / "data"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes, read in chunks (LongMemEval-S is 277 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def state(entry: CatalogueEntry, directory: Path, *, verify: bool = False) -> str:
    """Whether ``entry`` is here, in a few words: ``here``, ``not fetched``, a cut download, or another file.

    Only what ``data fetch`` stored is ``here`` (it checked the bytes); ``verify`` hashes the file again.
    """
    path = directory / entry.filename
    part = _part(path)
    if not path.exists():
        if part.exists():
            return f"not fetched (a cut download of {part.stat().st_size:,} of {entry.size:,} bytes: fetch resumes it)"
        return "not fetched"
    problem = mismatch(entry, path, sha256=verify)
    if problem is not None:
        return f"a different file is there ({problem}): fetch replaces it"
    return "here, sha256 checked" if verify else "here"


def mismatch(entry: CatalogueEntry, path: Path, *, sha256: bool = True) -> str | None:
    """Why the file at ``path`` is not ``entry``'s bytes (its size, else its sha256), or ``None``: the one check
    of a stored file, a fetched one and a listed one. ``sha256=False``: the size alone (no hashing)."""
    size = path.stat().st_size
    if size != entry.size:
        return f"{size:,} bytes, not the {entry.size:,} of {entry.filename}"
    if sha256:
        digest = file_sha256(path)
        if digest != entry.sha256:
            return f"its sha256 is not the catalogue's: {digest[:16]}..., not {entry.filename}'s {entry.sha256[:16]}..."
    return None


class NotFetched(ValueError):
    """``--restore-data=NAME`` names a known dataset that is not in the data directory."""


def resolve_name(value: str, option: str, directory: Path | None = None) -> str:
    """The file ``value`` names for ``option``: an existing path as it is, a known dataset's name as the
    file ``data fetch`` stored (:class:`NotFetched` when it is not there, naming the command that gets it),
    anything else unchanged (the loader then says the file is missing).

    A path wins over a name, so a file called ``locomo`` in the project is read as that file.
    """
    entry = catalogue().get(value)
    if entry is None or entry.option != option or os.path.exists(value):
        return value
    where = data_dir(directory)
    path = where / entry.filename
    if not path.is_file():
        raise NotFetched(
            f"{option}={value}: {entry.name} is not fetched (no {path}); get it with "
            f"`python -m pytest_restore data fetch {entry.name}`"
            + ("" if directory is not None or os.environ.get(DATA_DIR_ENV) else f", or set {DATA_DIR_ENV} to where it is")
        )
    return str(path)


class FetchError(Exception):
    """A fetch that did not store the file: one line, and the exit code the command line returns."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Fetched:
    """What a fetch did."""

    path: Path
    #: False when a checked copy was already there (nothing downloaded)
    downloaded: bool
    #: bytes of an earlier cut download that were kept (0: started from the first byte)
    resumed_from: int = 0


Say = Callable[[str], None]


def _part(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def _quiet(line: str) -> None:
    """Say nothing."""


def fetch(
    entry: CatalogueEntry,
    directory: Path,
    *,
    source: str | None = None,
    say: Say = _quiet,
    timeout: float = 60.0,
) -> Fetched:
    """Store ``entry`` in ``directory`` from its URL, or from ``source`` (a URL or a local path), checked.

    Every failure is a :class:`FetchError`: unreachable or not served (:data:`UNAVAILABLE`; a cut
    download keeps its ``.part`` for the next fetch to resume), refused for its size or sha256
    (:data:`DATA_ERROR`; nothing kept), the directory not writable (``IO_ERROR``), a local ``source``
    that does not exist (2).
    """
    path = directory / entry.filename
    if path.is_file() and mismatch(entry, path) is None:
        return Fetched(path, downloaded=False)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FetchError(f"data directory {directory}: {os_cause(err)}", IO_ERROR) from None
    part = _part(path)
    origin = source or entry.url
    resumed = 0
    try:
        if urllib.parse.urlsplit(origin).scheme in ("http", "https", "file"):
            resumed = _download(entry, origin, part, say, timeout)
        else:
            _copy(origin, part)
    except OSError as err:  # the part file could not be written (a full disk, a read-only directory)
        raise FetchError(f"data directory {directory}: {os_cause(err)}", IO_ERROR) from None
    _check(entry, origin, part)
    os.replace(part, path)
    return Fetched(path, downloaded=True, resumed_from=resumed)


def _copy(origin: str, part: Path) -> None:
    """A local copy into the part file (a missing one is an argument error, exit 2)."""
    if not os.path.isfile(origin):
        raise FetchError(f"--from {origin}: no such file", 2)
    shutil.copyfile(origin, part)


def _check(entry: CatalogueEntry, origin: str, part: Path) -> None:
    """The part file is the catalogue's bytes, else it is deleted and the fetch refused in one line."""
    problem = mismatch(entry, part)
    if problem is not None:
        part.unlink()
        raise FetchError(f"{origin}: {problem}: refused, nothing kept", DATA_ERROR)


def _download(entry: CatalogueEntry, url: str, part: Path, say: Say, timeout: float) -> int:
    """Download ``url`` into ``part``, resuming a cut download there; the bytes kept from it."""
    have = part.stat().st_size if part.exists() else 0
    if have >= entry.size:  # a part as long as the file was refused or is damaged: start again
        part.unlink()
        have = 0
    from pytest_restore import __version__

    headers = {"User-Agent": f"pytest-restore/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as err:
        err.close()
        if err.code == 416 and have:  # the server cannot serve the range: start again
            part.unlink()
            return _download(entry, url, part, say, timeout)
        raise FetchError(f"{url}: HTTP {err.code} {err.reason}: {entry.filename} not served there", UNAVAILABLE) from None
    except (urllib.error.URLError, OSError) as err:
        cause = err.reason if isinstance(err, urllib.error.URLError) else err
        host = urllib.parse.urlsplit(url).netloc or url
        raise FetchError(
            f"cannot reach {host} ({cause}): offline? `--from` takes a mirror or a local copy", UNAVAILABLE
        ) from None
    with response:
        status = getattr(response, "status", 200) or 200
        content_range = response.headers.get("Content-Range", "") or ""
        if have and status == 206 and content_range.startswith(f"bytes {have}-"):
            mode = "ab"
            say(f"resuming {entry.filename} at byte {have:,} of {entry.size:,}")
        else:
            mode, have = "wb", 0  # the server sent the whole file: start again
            say(f"downloading {entry.filename} ({entry.size:,} bytes) from {url}")
        announced = response.headers.get("Content-Length")
        expected = have + int(announced) if announced and announced.isdigit() else None
        got = have
        step = max(entry.size // 10, _CHUNK)
        next_say = got + step
        with open(part, mode) as out:  # a write that fails (a full disk) is fetch's I/O error
            while True:
                try:
                    chunk = response.read(_CHUNK)
                except (OSError, http.client.HTTPException) as err:  # reset, timeout, a broken chunk
                    raise _cut(entry, url, got, err) from None
                if not chunk:
                    break
                out.write(chunk)
                got += len(chunk)
                if got > entry.size:  # longer than the file is: not it (nothing more is read)
                    break
                if next_say <= got < entry.size:
                    say(f"{entry.filename}: {got:,} of {entry.size:,} bytes")
                    next_say = got + step
        if got > entry.size:
            part.unlink()
            raise FetchError(f"{url}: more than the {entry.size:,} bytes of {entry.filename}: refused, nothing kept", DATA_ERROR)
        if expected is not None and got < expected:
            raise _cut(entry, url, got, None)
    return have


def _cut(entry: CatalogueEntry, url: str, got: int, err: BaseException | None) -> FetchError:
    """A download that ended before the server's announced length: the part is kept for the next fetch."""
    why = f" ({err})" if err is not None and str(err) else ""
    return FetchError(
        f"{url}: the download was cut after {got:,} of {entry.size:,} bytes{why}; the same command resumes it",
        UNAVAILABLE,
    )


def say_stderr(line: str) -> None:
    """A progress line on stderr (the command line's ``say``)."""
    print(f"data: {line}", file=sys.stderr)
