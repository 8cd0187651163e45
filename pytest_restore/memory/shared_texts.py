"""The distinct texts of an audit prepared once for every process of a run: token counts, word profiles and
fact densities.

Every xdist worker audits every question, so each used to prepare every
history itself: read the token counts (a mapping of every distinct text,
unmarshalled into a second copy of the file's text), then profile every unit
content's words again (``memory/lexical.py``), private arrays and an object
per text in each worker, and the control policy scanned every unit content for
its fact density (``memory/eviction.py``) in each worker that ran one of its
cells. The controller now does all three once
(:func:`share_ahead`), the profiling while its counting processes
run, into one file in the prepared cache that each worker maps
(:func:`use_shared`): each unit's size is read off the file (the worker
neither lists the texts that were counted nor looks a count up to build a
history), the contents' and turn headers' counts join its token memo (keyed
by its own strings), the profiles are read off the mapped arrays, and the
file's vocabulary becomes the worker's, so its word ids are the file's, and the
densities join the worker's memo of them.

The file is a header (its format, its key, where each array lies, and the
CRC-32 of everything after it) followed by the arrays. Its name and its
header carry the key: the data file's sha256, the granularity, the audited
questions and the code that makes the texts, counts, profiles and densities. Rows
follow the texts' first-use order over the audited questions, which every
process lists the same way (:func:`unit_texts`), each row's length in
characters is stored and compared, and so are the numbers of units and
headers. A file that is stale (another key, other texts), truncated or damaged
(its CRC) is never used: the process prepares its histories itself, as a
serial run does, and the controller writes it again on its next run.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pytest_restore.data.dataset import Question
from pytest_restore.data.tokens import remember_counts
from pytest_restore.data.units import (
    Granularity,
    count_ahead,
    distinct_texts,
    first_of_each_history,
    turn_header,
    unit_contents,
    unit_sizes,
)
from pytest_restore.memory.eviction import fact_densities, remember_densities
from pytest_restore.memory.lexical import ProfileRows, SharedProfiles, install_shared, profile_csr

#: The file's first bytes: what it is and its layout's version.
MAGIC = b"PRTEXTS2"
#: Each array starts at a multiple of this (mapped arrays are then aligned).
_ALIGN = 64
#: The arrays, in the file's order, and their element types.
_ARRAYS = {
    "sizes": np.int64,  # per unit of each audited history (first use), in order: its o200k size (History.sizes)
    "content_tokens": np.int64,  # per profiled text: its own o200k count, -1 where it was not counted alone
    "header_tokens": np.int64,  # per turn header (UnitTexts.headers): its o200k count
    "profiled_chars": np.int64,  # per profiled text (unit contents, first use): its length
    "offsets": np.int64,  # per profiled text, and one more: where its row starts in ids and counts
    "ids": np.int32,  # the rows' word ids (the file's vocabulary), ascending within a row
    "counts": np.int32,  # how often each word occurs in its text
    "totals": np.int64,  # per profiled text: its content words
    "densities": np.float64,  # per profiled text: its fact density (the control policy's score)
    "vocabulary": np.uint8,  # the words by id, ASCII, one a line
}


class SharedTextsError(ValueError):
    """A shared texts file that may not be used, and why."""


@dataclass(frozen=True)
class UnitTexts:
    """What every process lists of the audited questions' units, in the same order (first use over the
    questions, a shared history once): the distinct unit contents (the file's rows), the distinct turn
    headers, and each distinct history's key with its number of units (the file's sizes, end to end)."""

    contents: list[str]
    headers: list[str]
    histories: list[tuple[str, int]]


@dataclass(frozen=True)
class SharedTexts:
    """A checked file's arrays: the units' sizes, the contents' and headers' counts, the profiles and the
    vocabulary their ids are of, the densities."""

    sizes: npt.NDArray[np.int64]
    content_tokens: npt.NDArray[np.int64]
    header_tokens: npt.NDArray[np.int64]
    profiles: SharedProfiles
    words: list[str]
    densities: npt.NDArray[np.float64]


def unit_texts(questions: Sequence[Question], granularity: Granularity) -> UnitTexts:
    """The units' texts of the audited ``questions`` the file has rows for, in the same order in every process.

    One pass over the turns, no text made: a turn header is made once per distinct (date, role).
    """
    contents: dict[str, None] = {}
    pairs: dict[tuple[str, str], None] = {}
    histories: list[tuple[str, int]] = []
    for q in first_of_each_history(questions):
        if granularity is Granularity.TURN:
            n = 0
            for date, session in zip(q.haystack_dates, q.haystack_sessions):
                for turn in session:
                    contents[turn.content] = None
                    pairs[date, turn.role] = None
                n += len(session)
            histories.append((q.history_key, n))
        else:
            texts = unit_contents(q, granularity)
            contents.update(dict.fromkeys(texts))
            histories.append((q.history_key, len(texts)))
    return UnitTexts(list(contents), [turn_header(date, role) for date, role in pairs], histories)


def shared_texts_name(dataset_sha256: str, granularity: Granularity, questions: Sequence[Question]) -> str:
    """The file's name: the data, the granularity, the audited questions and the code all in its key."""
    return f"shared-texts-{_key(dataset_sha256, granularity, questions)[:24]}.bin"


def _key(dataset_sha256: str, granularity: Granularity, questions: Sequence[Question]) -> str:
    from pytest_restore.data import tokens, units, words
    from pytest_restore.memory import eviction, lexical
    from pytest_restore.memory.kernel_cache import KERNELS_FILE  # its source, without loading numba

    code = hashlib.sha256()
    sources = [Path(str(module.__file__)) for module in (units, tokens, words, lexical)]
    for source in (*sources, KERNELS_FILE, Path(str(eviction.__file__))):  # eviction: the fact density's rule
        code.update(source.read_bytes())
    code.update(Path(__file__).read_bytes())
    audited = hashlib.sha256("\x1e".join(f"{q.question_id}\x1f{q.history_key}" for q in questions).encode())
    parts = (MAGIC.decode(), dataset_sha256, granularity.value, audited.hexdigest(), code.hexdigest())
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _chars(texts: Sequence[str]) -> npt.NDArray[np.int64]:
    return np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))


def write_shared(
    path: Path, key: str, texts: UnitTexts, counts: Mapping[str, int], sizes: Sequence[int], words: Sequence[str],
    rows: ProfileRows, densities: npt.NDArray[np.float64],
) -> None:
    """Write the file atomically (a temporary file renamed): readers see the old file or the whole new one.
    ``counts``: every :func:`~pytest_restore.data.units.distinct_texts` count; ``sizes``: the units', end to end."""
    offsets = np.zeros(len(texts.contents) + 1, dtype=np.int64)
    np.cumsum(rows.sizes, out=offsets[1:])
    arrays: dict[str, npt.NDArray[Any]] = {
        "sizes": np.asarray(sizes, dtype=np.int64),
        "content_tokens": np.fromiter((counts.get(c, -1) for c in texts.contents), dtype=np.int64, count=len(texts.contents)),
        "header_tokens": np.fromiter((counts[h] for h in texts.headers), dtype=np.int64, count=len(texts.headers)),
        "profiled_chars": _chars(texts.contents),
        "offsets": offsets,
        "ids": rows.ids,
        "counts": rows.counts,
        "totals": rows.totals,
        "densities": densities,
        "vocabulary": np.frombuffer("\n".join(words).encode("ascii"), dtype=np.uint8),
    }
    layout: dict[str, list[int]] = {}
    at = 0
    for name, dtype in _ARRAYS.items():
        data = np.ascontiguousarray(arrays[name], dtype=dtype)
        arrays[name] = data
        layout[name] = [at, data.size]
        at += -(-data.nbytes // _ALIGN) * _ALIGN
    crc = 0
    for name in _ARRAYS:
        crc = zlib.crc32(_padded(arrays[name]), crc)
    header = json.dumps({"key": key, "arrays": layout, "crc32": crc, "words": len(words)}).encode()
    head = MAGIC + len(header).to_bytes(8, "little") + header
    head += b"\0" * (-len(head) % _ALIGN)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(head)
        for name in _ARRAYS:
            f.write(_padded(arrays[name]))
    os.replace(tmp, path)


def _padded(data: npt.NDArray[np.generic]) -> bytes:
    raw = data.tobytes()
    return raw + b"\0" * (-len(raw) % _ALIGN)


def read_shared(path: Path, key: str, texts: UnitTexts) -> SharedTexts:
    """The file's arrays for ``texts``, mapped, once it is checked; :class:`SharedTextsError` says why not."""
    try:
        with open(path, "rb") as f:
            start = f.read(16)
            if len(start) < 16 or start[:8] != MAGIC:
                raise SharedTextsError(f"{path.name}: not a shared texts file")
            size = int.from_bytes(start[8:], "little")
            try:
                header = json.loads(f.read(size))
                layout = {name: (int(at), int(n)) for name, (at, n) in header["arrays"].items()}
                stored_key, crc, n_words = header["key"], int(header["crc32"]), int(header["words"])
            except (ValueError, KeyError, TypeError) as exc:
                raise SharedTextsError(f"{path.name}: unreadable header") from exc
            if stored_key != key:
                raise SharedTextsError(f"{path.name}: made for other data, questions or code")
            base = 16 + size + (-(16 + size) % _ALIGN)
            if set(layout) != set(_ARRAYS):
                raise SharedTextsError(f"{path.name}: unreadable header")
            end = base + max(at + -(-n * np.dtype(_ARRAYS[name]).itemsize // _ALIGN) * _ALIGN for name, (at, n) in layout.items())
            if os.fstat(f.fileno()).st_size != end:
                raise SharedTextsError(f"{path.name}: {os.fstat(f.fileno()).st_size} bytes, expected {end}")
            # the check reads the file (the page cache), not the mapping: pages are mapped in as rows are read
            got = 0
            f.seek(base)
            while chunk := f.read(8 << 20):
                got = zlib.crc32(chunk, got)
            if got != crc:
                raise SharedTextsError(f"{path.name}: damaged (CRC-32 {got:08x}, expected {crc:08x})")
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise SharedTextsError(f"{path.name}: {exc.strerror or exc}") from exc
    arrays = {
        name: np.frombuffer(mapped, dtype=_ARRAYS[name], count=n, offset=base + at) for name, (at, n) in layout.items()
    }
    units = sum(n for _, n in texts.histories)
    if (arrays["profiled_chars"].size != len(texts.contents) or arrays["sizes"].size != units
            or arrays["header_tokens"].size != len(texts.headers)):
        raise SharedTextsError(f"{path.name}: rows for other texts")
    if not np.array_equal(arrays["profiled_chars"], _chars(texts.contents)):
        raise SharedTextsError(f"{path.name}: rows for other texts")
    words = arrays["vocabulary"].tobytes().decode("ascii").split("\n") if n_words else []
    n = len(texts.contents)
    if (len(words) != n_words or arrays["offsets"].size != n + 1 or arrays["densities"].size != n
            or arrays["content_tokens"].size != n):
        raise SharedTextsError(f"{path.name}: inconsistent arrays")
    profiles = SharedProfiles(texts.contents, arrays["offsets"], arrays["ids"], arrays["counts"], arrays["totals"])
    return SharedTexts(arrays["sizes"], arrays["content_tokens"], arrays["header_tokens"], profiles, words, arrays["densities"])


def share_ahead(
    questions: Sequence[Question],
    granularity: Granularity,
    dataset_sha256: str,
    directory: str | os.PathLike[str],
    counts_file: str | os.PathLike[str],
    starting: Callable[[int], None] | None = None,
    processes: int = 1,
) -> bool:
    """Leave in ``directory`` the shared texts file of ``questions`` (and their counts file: ``count_ahead``); whether
    anything was made. What an xdist controller does once before its workers prepare their histories: the
    profiles and the fact densities are made here while the counting processes count (they are started first),
    then each unit's size from the counts."""
    texts = unit_texts(questions, granularity)
    key = _key(dataset_sha256, granularity, questions)
    path = Path(directory) / shared_texts_name(dataset_sha256, granularity, questions)
    try:
        read_shared(path, key, texts)
        return False
    except SharedTextsError:
        pass
    made: list[tuple[tuple[list[str], ProfileRows], npt.NDArray[np.float64]]] = []

    def profile() -> None:
        made.append((profile_csr(texts.contents), fact_densities(texts.contents)))

    counted = distinct_texts(questions, granularity)
    tokens = count_ahead(questions, granularity, counts_file, starting, processes, texts=counted, meanwhile=profile)
    (words, rows), densities = made[0]
    counts = dict(zip(counted, tokens))
    sizes = [size for q in first_of_each_history(questions) for size in unit_sizes(q, granularity, counts)]
    try:
        write_shared(path, key, texts, counts, sizes, words, rows, densities)
    except OSError:
        return False  # a cache that cannot be written only costs time: each worker prepares its own
    return True


def use_shared(
    questions: Sequence[Question], granularity: Granularity, dataset_sha256: str, directory: str | os.PathLike[str]
) -> dict[str, list[int]] | None:
    """Take the units' sizes, the contents' and headers' token counts, word profiles and fact densities of
    ``questions`` from the shared texts file in ``directory``, when there is one made for them and it checks
    out: each audited history's unit sizes by history key (``build_histories``' ``sizes``), else ``None``.

    Nothing is counted and no text but the units' own is listed: the counts join this process's token memo
    keyed by its own strings (a prompt's usage reads its contents' counts there)."""
    path = Path(directory) / shared_texts_name(dataset_sha256, granularity, questions)
    if not path.exists():
        return None
    texts = unit_texts(questions, granularity)
    try:
        shared = read_shared(path, _key(dataset_sha256, granularity, questions), texts)
    except SharedTextsError:
        return None
    counts = dict(zip(texts.headers, shared.header_tokens.tolist()))
    counts.update((c, n) for c, n in zip(texts.contents, shared.content_tokens.tolist()) if n >= 0)
    remember_counts(counts)
    remember_densities(texts.contents, shared.densities.tolist())
    install_shared(shared.words, shared.profiles)  # a process with a vocabulary of its own profiles the texts itself
    sizes = shared.sizes.tolist()
    by_history: dict[str, list[int]] = {}
    at = 0
    for history_key, n in texts.histories:
        by_history[history_key] = sizes[at : at + n]
        at += n
    return by_history
