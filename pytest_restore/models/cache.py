"""Response cache: every successful model reply, on disk, shared by all processes.

A full audit sends tens of thousands of reader, judge and scorer calls; the
cache makes a rerun (after a crash, a kill, or a change to the report only)
cost nothing for what already completed, and lets several pytest-xdist
workers share one directory.

**Key.** The sha256 of a canonical JSON of everything that changes a reply:
the model name as configured (``gpt-4o-mini``), the messages, ``max_tokens``
and ``temperature``, the reply format (a structured reply's schema and style;
only when one is asked), the wire extras of a library's request through the
gateway (its tools, tool calls and tool results; only when there are any),
plus a schema version. Deliberately *not* in the key:

- the API key (a secret, and it does not change the reply);
- the base URL: the same model reached through a proxy, a gateway or a
  different port of a local server gives the same replies, and tests start
  their server on a random port. Use one cache directory per provider if two
  providers serve *different* models under the same name;
- the served snapshot id (``gpt-4o-mini-2024-07-18``): it is only known after
  the call. It is stored in the entry, and reports can show it.

**Layout.** ``<dir>/<key[:2]>/<key>.json``, one file per entry, fanned out
over 256 subdirectories. An entry holds the reply text, the token usage, the
served model id and the requested model name; never a key or header. Entries
are written to a temporary file in the same directory and moved into place
with ``os.replace``, so a reader sees a whole entry or none, even when a
process is killed mid-write. Only successful replies are cached: a failure is
retried by the next run.

**In-flight dedupe across processes.** Before sending, a process takes an
exclusive ``flock`` on ``<key>.lock`` next to the entry. A process that finds
the lock held waits (without holding a concurrency slot) until it is free,
then reads the entry the holder wrote. The kernel releases a dead process's
``flock``, so a killed holder never blocks anyone (no stale-lock timeouts on a
local disk); a waiter gives up waiting after ``lock_timeout`` seconds and
sends the request itself, which costs a duplicate call, never a wrong answer.
On platforms without ``fcntl`` the cache still works, without the in-flight
dedupe.

**Failures, shared for one run.** A model created for a run (``run`` set)
leaves each call that failed for good as ``<key>.failed``, stamped with the
run: another process of the same run that asks for the same request (an
xdist worker running another cell) gets the same failure instead of paying
for the same retries again, exactly as it would get a success. Another run
ignores the stamp and tries again; a later success removes it.

**A disk that refuses.** Every write (lock, entry, failure) that fails with
an ``OSError`` (a full disk, a read-only directory, a file where a directory
should be) is raised as :class:`CacheError`, one line naming the cache and
the cause. A failed write never leaves a lock held or a lock file behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pytest_restore.exits import os_cause
from pytest_restore.models.base import ChatRequest, ChatResult

if TYPE_CHECKING:
    from typing_extensions import Self

try:  # POSIX only; elsewhere the cache runs without cross-process locks
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: This machine's name, written into a lock file for whoever looks at a stuck run.
_HOST = socket.gethostname()
#: Bumped whenever the key's canonical form or the entry layout changes.
CACHE_SCHEMA = 1


class CacheError(OSError):
    """The response cache cannot be written (one line: the cache and the cause)."""


def cache_problem(directory: str | os.PathLike[str]) -> str | None:
    """Why the response cache at ``directory`` cannot be used, in one line, or ``None``.

    Checked before any model call: the directory is created if need be, must
    be a directory, and must take a file (written and removed again).
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return f"response cache {path}: not a directory (a file is in its place)"
    except OSError as err:
        return f"response cache {path}: cannot create it: {os_cause(err)}"
    if not path.is_dir():
        return f"response cache {path}: not a directory (a file is in its place)"
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=path)
        try:
            os.write(fd, b"probe\n")
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        return f"response cache {path}: cannot write into it: {os_cause(err)}"
    return None


def request_key(model: str, request: ChatRequest) -> str:
    """The cache key of ``request`` sent to ``model``: a sha256 hex digest.

    Canonical JSON (sorted keys, no whitespace, UTF-8) of the model name,
    the messages, ``max_tokens``, ``temperature``, the reply format when one
    is asked, the wire extras of a gateway's request when set (a free-text request's key is the one it had before formats
    existed) and the schema version.
    """
    keyed: dict[str, Any] = {
        "schema": CACHE_SCHEMA,
        "model": model,
        "messages": [[role, content] for role, content in request.messages],
        "max_tokens": request.max_tokens,
        "temperature": float(request.temperature),
    }
    if request.reply_format is not None:
        keyed["reply_format"] = request.reply_format.to_json()
    if request.wire is not None:  # a library's request through the gateway: tools, tool messages, formats
        keyed["wire"] = request.wire
    canonical = json.dumps(
        keyed,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheStats:
    """What one process's cache object did."""

    #: Lookups answered from disk.
    hits: int
    #: Lookups that found nothing (the request then had to be sent or waited for).
    misses: int
    #: Entries this process wrote.
    writes: int
    #: Times a request waited for another process that was sending it.
    waits: int


class KeyLock:
    """An exclusive, cross-process claim on one cache key (an ``flock``).

    Use as a context manager; leaving it removes the lock file and releases
    the lock, in that order, so no later claimant can lock a file that is
    about to disappear.
    """

    def __init__(self, path: Path, fd: int | None) -> None:
        self._path = path
        self._fd = fd

    def touch(self) -> None:
        """Refresh the lock file's mtime (shows that the holder is alive)."""
        if self._fd is not None:
            try:
                os.utime(self._path)
            except OSError:
                pass

    def release(self) -> None:
        """Remove the lock file and release the lock; idempotent."""
        if self._fd is None:
            return
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass
        os.close(self._fd)  # closing the descriptor drops the flock
        self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def try_flock(path: Path) -> KeyLock | None:
    """An exclusive ``flock`` on ``path`` (created if need be), or ``None`` if another process holds it.

    Without ``fcntl`` every claim succeeds (no cross-process exclusion).
    """
    if fcntl is None:  # pragma: no cover - Windows
        return KeyLock(path, None)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        # The previous holder may have unlinked the file between our open
        # and our flock; then we hold a lock nobody else can see. Retry.
        try:
            held = os.fstat(fd)
            same_file = held.st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same_file = False
        if same_file:
            try:
                if held.st_size:
                    # a dead holder's words; truncated only then: on ext4 a truncate to zero
                    # makes the close that follows flush (auto_da_alloc), ~3 ms a request
                    os.ftruncate(fd, 0)
                # Who holds it, for a human looking at a stuck run.
                os.write(fd, f"{os.getpid()} {_HOST}\n".encode())
            except BaseException:
                # A full disk: the lock must not stay held by a descriptor nobody owns (every
                # later claim of the key in this process would wait for it), nor its file left.
                KeyLock(path, fd).release()
                raise
            return KeyLock(path, fd)
        os.close(fd)


class ResponseCache:
    """A persistent directory of successful chat replies, safe across processes."""

    def __init__(
        self, directory: str | os.PathLike[str], *, lock_timeout: float = 900.0, run: str | None = None
    ) -> None:
        """Open (and create) the cache at ``directory``.

        ``lock_timeout``: the longest a request waits for another process that
        is sending the same request before sending it itself. ``run`` names the
        run whose failed calls are shared between its processes (``None``:
        failures are not shared). A directory that cannot be made raises
        :class:`CacheError`.
        """
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise CacheError(f"response cache {self.directory}: not a directory (a file is in its place)") from None
        except OSError as err:
            raise CacheError(f"response cache {self.directory}: cannot create it: {os_cause(err)}") from None
        self.lock_timeout = lock_timeout
        self.run = run
        self._counts = {"hits": 0, "misses": 0, "writes": 0, "waits": 0}
        self._counts_lock = threading.Lock()

    # -- paths -------------------------------------------------------------

    def entry_path(self, key: str) -> Path:
        """Where the entry for ``key`` lives."""
        return self.directory / key[:2] / f"{key}.json"

    def _lock_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.lock"

    def _failure_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.failed"

    # -- reading -----------------------------------------------------------

    def get(self, model: str, request: ChatRequest) -> ChatResult | None:
        """The cached result of ``request`` to ``model``, or ``None``; counted in the stats."""
        result = self.peek(request_key(model, request))
        self._count("hits" if result is not None else "misses")
        return result

    def peek(self, key: str) -> ChatResult | None:
        """The cached result under ``key``, or ``None``; not counted in the stats.

        Anything that is not a whole entry of this schema for this key (random
        bytes, a directory in its place, valid JSON of another shape, an
        unreadable file) is a miss: the request is sent again and the entry
        replaced. A damaged cache never fails a run, a dry run included.
        """
        try:
            raw = self.entry_path(key).read_bytes()
            entry = json.loads(raw.decode("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(entry, dict) or entry.get("key", key) != key:
            return None
        text = entry.get("text")
        numbers = (entry.get("input_tokens", 0), entry.get("output_tokens", 0))
        if not isinstance(text, str) or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        return ChatResult(
            text=text,
            input_tokens=numbers[0],
            output_tokens=numbers[1],
            cached=True,
            extra={
                "model": str(entry.get("served_model", "")),
                "finish_reason": str(entry.get("finish_reason", "")),
                # "estimated": the model reported no usage (models.decoding.with_usage)
                **({"usage": str(entry["usage"])} if entry.get("usage") else {}),
            },
        )

    def contains(self, model: str, request: ChatRequest) -> bool:
        """Whether a reply to ``request`` is cached (for dry runs; not counted)."""
        return self.peek(request_key(model, request)) is not None

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("??/*.json"))

    # -- writing -----------------------------------------------------------

    def put(self, model: str, request: ChatRequest, result: ChatResult) -> None:
        """Store a successful ``result``; failed results are ignored."""
        if result.text is None:
            return
        key = request_key(model, request)
        entry = {
            "schema": CACHE_SCHEMA,
            "key": key,
            "model": model,
            "served_model": result.extra.get("model", ""),
            "finish_reason": result.extra.get("finish_reason", ""),
            "text": result.text,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            **({"usage": result.extra["usage"]} if result.extra.get("usage") else {}),
            "created": time.time(),
        }
        self._write(self.entry_path(key), entry)
        with contextlib.suppress(OSError):  # a success ends a failure of this run or an earlier one
            os.unlink(self._failure_path(key))
        self._count("writes")

    def put_failure(self, key: str, error: str) -> None:
        """Leave the failure of ``key`` for the other processes of this run (nothing without a run)."""
        if self.run is not None:
            self._write(self._failure_path(key), {"schema": CACHE_SCHEMA, "key": key, "run": self.run, "error": error})

    def failure(self, key: str) -> str | None:
        """The error of ``key``'s call that failed earlier in this run, or ``None``."""
        if self.run is None:
            return None
        try:
            entry = json.loads(self._failure_path(key).read_bytes().decode("utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(entry, dict) or entry.get("run") != self.run or entry.get("key") != key:
            return None  # another run's failure: tried again
        error = entry.get("error")
        return error if isinstance(error, str) else None

    def _write(self, path: Path, entry: dict[str, object]) -> None:
        """``entry`` as JSON at ``path``, atomically; an ``OSError`` is raised as :class:`CacheError`."""
        try:
            path.parent.mkdir(exist_ok=True)
            if path.is_dir() and not path.is_symlink():
                # outside damage in the entry's place: os.replace cannot move a file onto it
                shutil.rmtree(path, ignore_errors=True)
            # Temp file in the same directory: os.replace is atomic only within
            # one filesystem, and a killed writer leaves a stray .tmp, not a torn entry.
            fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump(entry, handle, ensure_ascii=False, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        except OSError as err:
            raise CacheError(f"response cache {self.directory}: cannot write: {os_cause(err)}") from None

    # -- cross-process claims ---------------------------------------------

    def try_lock(self, key: str) -> KeyLock | None:
        """Claim ``key`` for sending, or ``None`` if another process holds it now."""
        path = self._lock_path(key)
        try:
            path.parent.mkdir(exist_ok=True)
            return try_flock(path)
        except OSError as err:
            raise CacheError(f"response cache {self.directory}: cannot write: {os_cause(err)}") from None

    def note_wait(self) -> None:
        """Count one request that waited for another process."""
        self._count("waits")

    # -- stats -------------------------------------------------------------

    def stats(self) -> CacheStats:
        """Counts of hits, misses, writes and waits in this process."""
        with self._counts_lock:
            return CacheStats(**self._counts)

    def _count(self, name: str) -> None:
        with self._counts_lock:
            self._counts[name] += 1

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r})"
