"""JSON lines: the one reader and writer of every ``.jsonl`` file the project writes or reads.

A JSON-lines file is one JSON value per line, lines ended by ``\\n``. JSON
text may hold, unescaped inside a string, characters that Python's
``str.splitlines()`` also takes for line ends (U+2028 and U+2029, U+0085;
the others it knows are control characters JSON always escapes). A reader
that split with it would cut a valid record in two: a records file its own
session wrote would be refused, a batch answer quoting such a character
refused and paid for again. So every reader here splits on ``\\n`` only, and
every writer writes through :func:`dumps_line`, which never emits a raw
``\\n`` (JSON escapes it inside strings).

What a reader does with a bad line is its own (a records file stops, a batch
output line is refused and counted): :func:`numbered_lines` gives the lines,
:func:`read_text` the file's text or one line saying why it is not UTF-8
JSON-lines text (a gzip file, other bytes).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["JsonlError", "dumps", "dumps_line", "numbered_lines", "read_text"]

#: The first bytes of a gzip file.
_GZIP_MAGIC = b"\x1f\x8b"


class JsonlError(ValueError):
    """A file that is not JSON-lines text (one line naming the file and why)."""


def dumps_line(value: Any, *, sort_keys: bool = False, compact: bool = False) -> str:
    """``value`` as one JSON line, without its ``\\n`` (non-ASCII text kept as written)."""
    separators = (",", ":") if compact else None
    return json.dumps(value, sort_keys=sort_keys, ensure_ascii=False, separators=separators)


def dumps(values: Iterable[Any], *, sort_keys: bool = False, compact: bool = False) -> str:
    """A JSON-lines text: each value on its own line, each line ended by ``\\n``."""
    return "".join(dumps_line(v, sort_keys=sort_keys, compact=compact) + "\n" for v in values)


def numbered_lines(text: str) -> Iterator[tuple[int, str]]:
    """The non-blank lines of a JSON-lines text with their numbers (from 1), split on ``\\n`` only."""
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            yield number, line


def read_text(path: str | os.PathLike[str]) -> str:
    """A JSON-lines file's text; :class:`JsonlError` when it is gzip-compressed or not UTF-8.

    ``OSError`` (no such file, a directory) is the caller's to name.
    """
    p = Path(path)
    data = p.read_bytes()
    if data[:2] == _GZIP_MAGIC:
        raise JsonlError(f"{p}: a gzip file, not JSON lines (decompress it first: gunzip -k {p.name})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise JsonlError(f"{p}: line {line}: not UTF-8 text: bad byte at offset {err.start}") from None
