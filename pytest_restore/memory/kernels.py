"""Compiled inner loops of the built-in eviction policies, and two text scans (numba).

Online eviction is sequential: every arrival may evict, and each victim
depends on the previous ones, so it does not vectorise, and a grid has
millions of eviction events: these loops are compiled because in Python they
are a large share of the full grid's time (``python benches/bench_grid.py``
prints where the time goes). The control's fact density and the word
profiles scan every distinct turn of the file, which in Python is several
times their compiled cost; they are compiled for the same reason. numba compiles them on first
use and caches the machine code next to this file (or in the user's cache
directory when the package is read-only, or not at all when neither is
writable); set ``NUMBA_DISABLE_JIT=1`` to run them as plain Python.

Each kernel takes and returns plain arrays and makes the same choices, in
the same floating-point arithmetic, as the policy's documented rule; the
brute-force tests in ``tests/test_eviction.py`` hold them to it. The text
scans (word profiles, the control's fact density) read bytes; non-ASCII text reaches them as
UTF-8 or through ASCII stand-ins (:class:`StandIns`), and
``tests/test_text_paths.py`` holds them to the rules as written, on
adversarial strings with and without non-ASCII characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt
from numba import njit

from pytest_restore.data.words import FACT_STRIPPED, FIRST_PERSON

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(fn: _F) -> _F:
    """``fn`` compiled, its machine code cached on disk when numba finds a writable place."""
    try:
        return cast(_F, njit(cache=True, nogil=True)(fn))
    except RuntimeError:  # no writable cache directory: compile once per process instead
        return cast(_F, njit(nogil=True)(fn))

#: A kernel's signal that it ran out of pre-drawn random numbers.
OUT_OF_DRAWS = -1

_LOW32 = np.uint64(0xFFFFFFFF)
_TWO32 = np.uint64(0x100000000)


@_compiled
def _first(key: npt.NDArray[np.float64], a: int, b: int) -> bool:
    """Whether unit ``a`` goes before unit ``b``: the lower key, then the older unit."""
    return bool(key[a] < key[b] or (key[a] == key[b] and a < b))


@_compiled
def lowest_key(sizes: npt.NDArray[np.int64], budget: int, key: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Evict the stored unit with the lowest key after each arrival; ties to the older unit (the store)."""
    return lowest_key_left(sizes, budget, key)[0]


@_compiled
def lowest_key_left(
    sizes: npt.NDArray[np.int64], budget: int, key: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """:func:`lowest_key`'s store, and for each unit the arrival that evicted it (-1: kept).

    The stored units sit in a binary min-heap ordered by :func:`_first`:
    O(n log n) for a history of n units.
    """
    n = sizes.shape[0]
    stored = np.zeros(n, dtype=np.bool_)
    left = np.full(n, -1, dtype=np.int64)
    heap = np.empty(n, dtype=np.int64)  # positions
    size = 0
    total = 0
    for pos in range(n):
        i = size  # the newcomer rises from the bottom
        size += 1
        while i > 0 and _first(key, pos, heap[(i - 1) >> 1]):
            heap[i] = heap[(i - 1) >> 1]
            i = (i - 1) >> 1
        heap[i] = pos
        stored[pos] = True
        total += sizes[pos]
        while total > budget:
            victim = heap[0]
            size -= 1
            last = heap[size]
            i = 0  # the last entry sinks from the root
            while 2 * i + 1 < size:
                child = 2 * i + 1
                if child + 1 < size and _first(key, heap[child + 1], heap[child]):
                    child += 1
                if not _first(key, heap[child], last):
                    break
                heap[i] = heap[child]
                i = child
            heap[i] = last
            stored[victim] = False
            left[victim] = pos
            total -= sizes[victim]
    return stored, left


@_compiled
def below(draws: npt.NDArray[np.uint32], k: int, high: int) -> tuple[int, int]:
    """``Generator.integers(high)`` from the 32-bit draws ``draws[k:]``: (value, next k).

    numpy maps a draw ``u`` to ``(u * high) >> 32`` (Lemire's method), drawing
    again while the low 32 bits fall under ``(2**32 - high) % high``, and
    draws nothing for ``high == 1``. Returns ``(OUT_OF_DRAWS, k)`` when the
    draws run out.
    """
    if high <= 1:
        return 0, k
    h = np.uint64(high)
    if k >= draws.shape[0]:
        return OUT_OF_DRAWS, k
    m = np.uint64(draws[k]) * h
    k += 1
    if (m & _LOW32) < h:
        threshold = (_TWO32 - h) % h
        while (m & _LOW32) < threshold:
            if k >= draws.shape[0]:
                return OUT_OF_DRAWS, k
            m = np.uint64(draws[k]) * h
            k += 1
    return int(np.int64(m >> np.uint64(32))), k


@_compiled
def random_victims(sizes: npt.NDArray[np.int64], budget: int, draws: npt.NDArray[np.uint32]) -> tuple[npt.NDArray[np.bool_], bool]:
    """Evict a uniformly random stored unit after each arrival: (store, enough draws)."""
    stored, _, enough = random_victims_left(sizes, budget, draws)
    return stored, enough


@_compiled
def random_victims_left(
    sizes: npt.NDArray[np.int64], budget: int, draws: npt.NDArray[np.uint32]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], bool]:
    """:func:`random_victims`' store, for each unit the arrival that evicted it (-1: kept), enough draws.

    The victim is the ``integers(len(stored))``-th stored unit in arrival
    order, exactly as ``list.pop`` on the list of stored units would take it.
    Arrival order is position order, so that is the i-th smallest stored
    position, found in O(log n) in a Fenwick tree of stored positions.
    """
    n = sizes.shape[0]
    tree = np.zeros(n + 1, dtype=np.int64)  # Fenwick tree over positions 1..n: 1 = stored
    top = 1
    while top * 2 <= n:
        top *= 2
    stored = np.zeros(n, dtype=np.bool_)
    left = np.full(n, -1, dtype=np.int64)
    held = 0
    total = 0
    k = 0
    for pos in range(n):
        j = pos + 1
        while j <= n:
            tree[j] += 1
            j += j & -j
        stored[pos] = True
        held += 1
        total += sizes[pos]
        while total > budget:
            i, k = below(draws, k, held)
            if i == OUT_OF_DRAWS:
                return np.zeros(n, dtype=np.bool_), left, False
            # the (i + 1)-th stored position: descend the tree
            at = 0
            rest = i + 1
            step = top
            while step > 0:
                nxt = at + step
                if nxt <= n and tree[nxt] < rest:
                    at = nxt
                    rest -= tree[nxt]
                step >>= 1
            victim = at  # 0-based: tree index at + 1
            j = victim + 1
            while j <= n:
                tree[j] -= 1
                j += j & -j
            stored[victim] = False
            left[victim] = pos
            held -= 1
            total -= sizes[victim]
    return stored, left, True


@_compiled
def _best_older(overlap: Any, root: npt.NDArray[np.float64], stored: npt.NDArray[np.bool_], u: int) -> tuple[float, int]:
    """The first stored unit older than ``u`` of highest cosine with ``u`` (-inf, -1 if none)."""
    best = -np.inf
    lo = -1
    for v in range(u):
        if stored[v]:
            value = overlap[u, v] / (root[u] * root[v])
            if value > best:
                best = value
                lo = v
    return best, lo


@_compiled
def redundancy_victims(
    overlap: Any, root: npt.NDArray[np.float64], sizes: npt.NDArray[np.int64], budget: int
) -> npt.NDArray[np.bool_]:
    """Evict the older unit of the most similar stored pair after each arrival (the store)."""
    return redundancy_victims_left(overlap, root, sizes, budget)[0]


@_compiled
def redundancy_victims_left(
    overlap: Any, root: npt.NDArray[np.float64], sizes: npt.NDArray[np.int64], budget: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """:func:`redundancy_victims`' store, and for each unit the arrival that evicted it (-1: kept).

    ``overlap[u, v]`` counts the content words units ``u`` and ``v`` share and
    ``root`` is the square root of each unit's word count (1 for none), so
    ``overlap[u, v] / (root[u] * root[v])`` is their cosine, computed as
    numpy computes it. Each stored unit ``u`` keeps its best pair with an
    older stored unit ``lo[u]`` (the oldest among ties); the victim is
    ``lo[u]`` of the pair with the highest cosine, ties to the smaller
    ``lo[u]``, then the smaller ``u``. Evicting a unit changes only the pairs
    of the units whose ``lo`` it was. A lone stored unit over the budget is
    evicted itself.
    """
    n = sizes.shape[0]
    stored = np.zeros(n, dtype=np.bool_)
    left = np.full(n, -1, dtype=np.int64)
    best = np.full(n, -np.inf)
    lo = np.full(n, -1, dtype=np.int64)
    total = 0
    for pos in range(n):
        best[pos], lo[pos] = _best_older(overlap, root, stored, pos)
        stored[pos] = True
        total += sizes[pos]
        while total > budget:
            pair = -1
            for u in range(pos + 1):
                if (
                    stored[u]
                    and lo[u] >= 0
                    and (pair < 0 or best[u] > best[pair] or (best[u] == best[pair] and lo[u] < lo[pair]))
                ):
                    pair = u
            victim = lo[pair] if pair >= 0 else -1
            if victim < 0:  # no pair at all: the one stored unit
                for u in range(pos + 1):
                    if stored[u]:
                        victim = u
                        break
            stored[victim] = False
            left[victim] = pos
            lo[victim] = -1
            total -= sizes[victim]
            for u in range(victim + 1, pos + 1):
                if stored[u] and lo[u] == victim:
                    best[u], lo[u] = _best_older(overlap, root, stored, u)
    return stored, left


@_compiled
def pair_overlaps(words: npt.NDArray[np.integer[Any]], lengths: npt.NDArray[np.int64], vocabulary: int) -> npt.NDArray[np.uint32]:
    """Shared-word counts of every pair of units, below the diagonal; word counts on it.

    ``words`` concatenates each unit's distinct word ids (``lengths[u]`` of
    them for unit ``u``, each below ``vocabulary``). ``[u, v]`` for ``v < u``
    counts the words units ``u`` and ``v`` share; ``[u, u]`` is ``lengths[u]``;
    the upper triangle is zero. Work: the sum over words of (units holding it)^2.
    """
    n = lengths.shape[0]
    # each word's units, ascending (a counting sort by word id)
    starts = np.zeros(vocabulary + 1, dtype=np.int64)
    for w in words:
        starts[w + 1] += 1
    for w in range(vocabulary):
        starts[w + 1] += starts[w]
    fill = starts[:-1].copy()
    members = np.empty(words.shape[0], dtype=np.int64)
    i = 0
    for u in range(n):
        for _ in range(lengths[u]):
            w = words[i]
            members[fill[w]] = u
            fill[w] += 1
            i += 1
    out = np.zeros((n, n), dtype=np.uint32)
    for w in range(vocabulary):
        a, b = starts[w], starts[w + 1]
        for i in range(a + 1, b):
            u = members[i]
            for j in range(a, i):
                out[u, members[j]] += 1
    for u in range(n):
        out[u, u] = lengths[u]
    return out


def pack(texts: Sequence[bytes]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """``texts`` end to end, and where each ends: the batch kernels' input (text ``k`` is ``data[ends[k-1]:ends[k]]``)."""
    data = np.frombuffer(b"".join(texts), dtype=np.uint8)
    return data, np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))


# -- non-ASCII text through the ASCII scans -------------------------------------------

_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


class StandIns(dict[str, str]):
    """Non-ASCII character -> the ASCII character that plays its part in one rule (computed once each).

    A scan over ASCII bytes then gives, on the stand-in text, what the rule
    as written gives on the original: each character is replaced by exactly
    one, so tokens and positions line up.
    """

    def __init__(self, rule: Callable[[str], str]) -> None:
        super().__init__()
        self._rule = rule

    def __missing__(self, char: str) -> str:
        stand_in = self._rule(char)
        assert len(stand_in) == 1 and stand_in.isascii()
        self[char] = stand_in
        return stand_in

    def apply(self, text: str) -> str:
        """``text`` with every non-ASCII character replaced by its stand-in."""
        return _NON_ASCII_RUN.sub(lambda run: "".join(map(self.__getitem__, run.group())), text)


# -- the control's fact density ------------------------------------------------------

#: What ``str.split()`` splits on, among ASCII bytes.
_SPACE = np.zeros(256, dtype=np.bool_)
_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
#: Longest word :func:`_word_code` packs: 7 bytes, the length in the eighth.
_PACKED_MAX = 7


def _word_code(word: bytes) -> int:
    """``word`` (at most 7 bytes) as one integer: its bytes little-endian, its length in the top byte,
    so two words share a code only when they are equal (NUL bytes included)."""
    return int.from_bytes(word, "little") | len(word) << 56


_STRIP = np.zeros(256, dtype=np.bool_)
_STRIP[[ord(c) for c in FACT_STRIPPED]] = True
assert all(w.isascii() and len(w) <= _PACKED_MAX for w in FIRST_PERSON)
#: The first-person words as :func:`_word_code` codes.
_FIRST_PERSON_CODES = np.array(sorted(_word_code(w.encode("ascii")) for w in FIRST_PERSON), dtype=np.int64)


@_compiled
def ascii_facts(text: npt.NDArray[np.uint8], space: npt.NDArray[np.bool_], strip: npt.NDArray[np.bool_],
                first_person: npt.NDArray[np.int64]) -> tuple[int, int]:
    """(fact-bearing tokens, tokens) of ASCII ``text``, by ``eviction.fact_density``'s rule.

    Tokens are the runs between whitespace. A token bears a fact when it holds
    a digit, starts with a capital letter and does not open a sentence (the
    token before it did not end with ``.``, ``!`` or ``?``), or is a
    first-person word once quotes and punctuation are stripped from both ends
    and it is lower-cased.
    """
    n = text.shape[0]
    i = 0
    facts = 0
    tokens = 0
    sentence_start = True
    while i < n:
        while i < n and space[text[i]]:
            i += 1
        if i >= n:
            break
        start = i
        digit = False
        while i < n and not space[text[i]]:
            if 48 <= text[i] <= 57:
                digit = True
            i += 1
        end = i
        tokens += 1
        fact = digit or (not sentence_start and 65 <= text[start] <= 90)
        if not fact:
            s, e = start, end
            while s < e and strip[text[s]]:
                s += 1
            while e > s and strip[text[e - 1]]:
                e -= 1
            if 0 < e - s <= _PACKED_MAX:  # the lower-cased token's _word_code
                code = np.int64(e - s) << 56
                for k in range(e - s):
                    c = text[s + k]
                    if 65 <= c <= 90:
                        c += 32
                    code |= np.int64(c) << (8 * k)
                for candidate in first_person:
                    if candidate == code:
                        fact = True
                        break
        if fact:
            facts += 1
        last = text[end - 1]
        sentence_start = last == 46 or last == 33 or last == 63
    return facts, tokens


def _fact_stand_in(char: str) -> str:
    """A non-ASCII character's part in ``fact_density``: whitespace, a digit, a capital, or other.

    ``str.split`` splits on ``isspace`` characters; ``\\d`` is ``isdecimal``;
    a capital is ``isupper``. No token with a non-ASCII character is a
    first-person word (none lower-cases into one), and none of the stand-ins
    is stripped or ends a sentence, so the other parts of the rule agree too.
    """
    if char.isspace():
        return " "
    if char.isdecimal():
        return "0"
    return "A" if char.isupper() else "x"


_FACT_STAND_INS = StandIns(_fact_stand_in)


def fact_counts(text: str) -> tuple[int, int]:
    """``ascii_facts`` of a string (non-ASCII characters through their stand-ins)."""
    if not text.isascii():
        text = _FACT_STAND_INS.apply(text)
    return ascii_facts(np.frombuffer(text.encode("ascii"), dtype=np.uint8), _SPACE, _STRIP, _FIRST_PERSON_CODES)


@_compiled
def ascii_facts_many(data: npt.NDArray[np.uint8], ends: npt.NDArray[np.int64], space: npt.NDArray[np.bool_],
                     strip: npt.NDArray[np.bool_], first_person: npt.NDArray[np.int64],
                     facts_out: npt.NDArray[np.int64], tokens_out: npt.NDArray[np.int64]) -> None:
    """``ascii_facts`` of each text of ``data`` (text ``k`` is ``data[ends[k-1]:ends[k]]``) into the two outputs."""
    start = 0
    for k in range(ends.shape[0]):
        facts, tokens = ascii_facts(data[start : ends[k]], space, strip, first_person)
        facts_out[k] = facts
        tokens_out[k] = tokens
        start = ends[k]


def fact_counts_many(texts: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`fact_counts` of each of ``texts``, as (facts, tokens) arrays, in one compiled pass."""
    raw = [(t if t.isascii() else _FACT_STAND_INS.apply(t)).encode("ascii") for t in texts]
    ends = np.cumsum(np.fromiter(map(len, raw), dtype=np.int64, count=len(raw)))
    facts = np.empty(len(raw), dtype=np.int64)
    tokens = np.empty(len(raw), dtype=np.int64)
    ascii_facts_many(np.frombuffer(b"".join(raw), dtype=np.uint8), ends, _SPACE, _STRIP, _FIRST_PERSON_CODES, facts, tokens)
    return facts, tokens


# -- word profiles: the content words of many texts, through one exact word table -------

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@_compiled
def profile_texts(data: npt.NDArray[np.uint8], ends: npt.NDArray[np.int64], first: int,
                  table: npt.NDArray[np.int64], pool: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
                  dropped: npt.NDArray[np.bool_], seen: npt.NDArray[np.int64], tally: npt.NDArray[np.int64],
                  info: npt.NDArray[np.int64], ids_out: npt.NDArray[np.int32], counts_out: npt.NDArray[np.int32],
                  starts_out: npt.NDArray[np.int64], totals_out: npt.NDArray[np.int64]) -> int:
    """Profile texts ``first``, ``first + 1``, ... of ``data`` (text ``k`` is ``data[ends[k-1]:ends[k]]``).

    A text is ASCII, or UTF-8 (whose bytes outside ASCII, all >= 0x80, only
    separate words). A word is a run of ``[a-z0-9]`` once ``A-Z`` are lower-cased; one-byte
    words and the words flagged in ``dropped`` are skipped. Each word is
    looked up in an open-addressing table (FNV-1a hash, linear probing) whose
    entries are ids + 1; an id's bytes are ``pool[offsets[id]:offsets[id+1]]``
    and are compared byte by byte, so two words share an id only when they
    are equal. A new word gets the next id (``info[0]`` ids exist,
    ``info[1]`` pool bytes are used). Text ``k``'s distinct word ids, ascending,
    go to ``ids_out[starts_out[k]:starts_out[k+1]]`` (``info[2]`` is the next
    free slot) with their counts in ``counts_out``; ``totals_out[k]`` is its
    number of content words. ``seen`` and ``tally`` are per-id scratch,
    ``info[3]`` a stamp that is new for every text.

    Returns the number of texts done: fewer than all when the table must
    grow first (it stays at most half full), so the caller grows it and calls
    again from there. The caller keeps ``pool``, ``offsets``, ``seen``,
    ``tally`` and ``dropped`` large enough for every word of the texts.
    """
    mask = table.shape[0] - 1
    for k in range(first, ends.shape[0]):
        begin = ends[k - 1] if k > 0 else 0
        end = ends[k]
        if 2 * (info[0] + (end - begin) // 2 + 1) > table.shape[0]:
            return k
        stamp = info[3]
        info[3] += 1
        start_ids = info[2]
        total = 0
        i = begin
        while i < end:
            s = i
            h = _FNV_OFFSET
            while i < end:  # the word starting at s, if any: its length and hash
                c = data[i]
                if 65 <= c <= 90:
                    c += 32
                if not (97 <= c <= 122 or 48 <= c <= 57):
                    break
                h = (h ^ np.uint64(c)) * _FNV_PRIME
                i += 1
            length = i - s
            if length == 0:  # a separator byte
                i += 1
                continue
            if length == 1:
                continue
            slot = np.int64(h & np.uint64(mask))
            while True:
                entry = table[slot]
                if entry == 0:  # a new word: its lower-cased bytes into the pool
                    wid = info[0]
                    at = info[1]
                    for j in range(length):
                        b = data[s + j]
                        pool[at + j] = b + 32 if 65 <= b <= 90 else b
                    offsets[wid + 1] = at + length
                    info[0] = wid + 1
                    info[1] = at + length
                    table[slot] = wid + 1
                    break
                wid = entry - 1
                a = offsets[wid]
                if offsets[wid + 1] - a == length:
                    same = True
                    for j in range(length):
                        b = data[s + j]
                        if 65 <= b <= 90:
                            b += 32
                        if pool[a + j] != b:
                            same = False
                            break
                    if same:
                        break
                slot = (slot + 1) & mask
            if dropped[wid]:
                continue
            total += 1
            if seen[wid] != stamp:
                seen[wid] = stamp
                tally[wid] = 1
                ids_out[info[2]] = wid
                info[2] += 1
            else:
                tally[wid] += 1
        ids_out[start_ids:info[2]].sort()
        for j in range(start_ids, info[2]):
            counts_out[j] = tally[ids_out[j]]
        starts_out[k + 1] = info[2]
        totals_out[k] = total
    return len(ends)


@_compiled
def rehash(table: npt.NDArray[np.int64], pool: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64],
           words: int, size: int) -> npt.NDArray[np.int64]:
    """:func:`profile_texts`'s table of ``words`` ids rebuilt at ``size`` slots (a power of two)."""
    out = np.zeros(size, dtype=np.int64)
    mask = size - 1
    for wid in range(words):
        h = _FNV_OFFSET
        for j in range(offsets[wid], offsets[wid + 1]):
            h = (h ^ np.uint64(pool[j])) * _FNV_PRIME
        slot = np.int64(h & np.uint64(mask))
        while out[slot] != 0:
            slot = (slot + 1) & mask
        out[slot] = wid + 1
    return out


@_compiled
def weighted_row_sums(
    starts: npt.NDArray[np.int64], ids: npt.NDArray[np.int64], weights: npt.NDArray[np.float32], table: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    """Row ``t`` of the result: the sum of ``weights[j] * table[ids[j]]`` for ``j`` in ``starts[t]:starts[t + 1]``.

    The fake embedder's bag of word vectors, one text a row (its words side
    by side would take a row of the table each).
    """
    n = starts.size - 1
    dims = table.shape[1]
    out = np.zeros((n, dims), dtype=np.float32)
    for t in range(n):
        for j in range(starts[t], starts[t + 1]):
            w = weights[j]
            row = ids[j]
            for d in range(dims):
                out[t, d] += w * table[row, d]
    return out
