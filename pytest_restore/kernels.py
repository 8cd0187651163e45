"""Compiled inner loops of the built-in eviction policies (numba).

Online eviction is sequential: every arrival may evict, and each victim
depends on the previous ones, so it does not vectorise. In Python the three
loops below cost several seconds per full grid (one event is a few
microseconds of interpreter work, and a 500-question grid has millions of
events); compiled, they cost tens of milliseconds. numba compiles them on
first use and caches the machine code next to this file (or in the user's
cache directory when the package is read-only); set ``NUMBA_DISABLE_JIT=1``
to run them as plain Python.

Each kernel takes and returns plain arrays and makes the same choices, in
the same floating-point arithmetic, as the policy's documented rule; the
brute-force tests in ``tests/test_eviction.py`` hold them to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

#: A kernel's signal that it ran out of pre-drawn random numbers.
OUT_OF_DRAWS = -1

_LOW32 = np.uint64(0xFFFFFFFF)
_TWO32 = np.uint64(0x100000000)


@njit(cache=True, nogil=True)
def lowest_key(sizes: npt.NDArray[np.int64], budget: int, key: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    """Evict the stored unit with the lowest key after each arrival; ties to the older unit."""
    n = sizes.shape[0]
    stored = np.zeros(n, dtype=np.bool_)
    total = 0
    for pos in range(n):
        stored[pos] = True
        total += sizes[pos]
        while total > budget:
            victim = -1
            for u in range(pos + 1):
                if stored[u] and (victim < 0 or key[u] < key[victim]):
                    victim = u
            stored[victim] = False
            total -= sizes[victim]
    return stored


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def random_victims(sizes: npt.NDArray[np.int64], budget: int, draws: npt.NDArray[np.uint32]) -> tuple[npt.NDArray[np.bool_], bool]:
    """Evict a uniformly random stored unit after each arrival: (store, enough draws).

    The stored units are kept in arrival order and the victim is the one at
    ``integers(len(stored))``, exactly as ``list.pop`` on that list would.
    """
    n = sizes.shape[0]
    order = np.empty(n, dtype=np.int64)
    held = 0
    total = 0
    k = 0
    for pos in range(n):
        order[held] = pos
        held += 1
        total += sizes[pos]
        while total > budget:
            i, k = below(draws, k, held)
            if i == OUT_OF_DRAWS:
                return np.zeros(n, dtype=np.bool_), False
            total -= sizes[order[i]]
            for j in range(i, held - 1):
                order[j] = order[j + 1]
            held -= 1
    stored = np.zeros(n, dtype=np.bool_)
    for j in range(held):
        stored[order[j]] = True
    return stored, True


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def redundancy_victims(
    overlap: Any, root: npt.NDArray[np.float64], sizes: npt.NDArray[np.int64], budget: int
) -> npt.NDArray[np.bool_]:
    """Evict the older unit of the most similar stored pair after each arrival.

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
            lo[victim] = -1
            total -= sizes[victim]
            for u in range(victim + 1, pos + 1):
                if stored[u] and lo[u] == victim:
                    best[u], lo[u] = _best_older(overlap, root, stored, u)
    return stored


@njit(cache=True, nogil=True)
def pair_overlaps(starts: npt.NDArray[np.int64], members: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.uint32]:
    """Shared-word counts of every pair of units, from each word's list of units.

    ``members[starts[w]:starts[w + 1]]`` are the units containing word ``w``
    (each once, ascending). Returns the symmetric ``n x n`` counts, zero
    diagonal.
    """
    out = np.zeros((n, n), dtype=np.uint32)
    for w in range(starts.shape[0] - 1):
        a, b = starts[w], starts[w + 1]
        for i in range(a, b):
            u = members[i]
            for j in range(a, i):
                out[u, members[j]] += 1
    for u in range(n):
        for v in range(u):
            out[v, u] = out[u, v]
    return out
