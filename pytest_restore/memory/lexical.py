"""Lexical analysis shared by the redundancy policy and the BM25-lite ranker.

Tokenisation: lower-case, split into runs of ASCII letters and digits, drop a
fixed list of English stopwords and one-character tokens. No stemming: the
ranker is a frozen lexical baseline, and a stemmer would be one more thing a
reader of the report has to trust.

Question texts are split in Python (:func:`pytest_restore.data.words.words`). Unit texts, hundreds of
thousands of them, are profiled in compiled passes over their bytes into
word-id and count arrays (:func:`word_profiles`), with the same words.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# words is re-exported: the profiles below must agree with it, and tests compare the two here.
from pytest_restore.data.words import STOPWORDS, words  # noqa: F401

#: Word -> id, process-wide; ids mean nothing across processes.
_VOCABULARY: dict[str, int] = {}
#: Id -> word, the same vocabulary read the other way.
_WORDS: list[str] = []


@dataclass(frozen=True, slots=True)
class WordProfile:
    """What the ranker and the redundancy policy need of one text, as small arrays.

    ``ids`` are the text's distinct content words as ascending ids of the
    process-wide vocabulary (:func:`term_id`), ``counts`` how often each
    occurs, ``total`` how many content words the text has. Memoised per
    distinct text, so its size is what the audit's memory grows with on a
    file of mostly distinct text: two small integers per distinct word of a
    text, rather than tuples, sets or dictionaries of word strings.
    """

    ids: npt.NDArray[np.int32]
    counts: npt.NDArray[np.int32]
    total: int


class _WordTable:
    """The process-wide vocabulary as arrays, for the compiled profiler (``kernels.profile_texts``).

    Profiling text word by word in Python makes a string object of every
    word of the file only to count and drop most of them. The compiled pass reads
    the bytes and looks each word up in an exact table (bytes compared, not
    only hashes); :data:`_VOCABULARY` mirrors the table's new words after
    every pass, so :func:`term_id` and the memo stay plain Python.
    """

    def __init__(self) -> None:
        self.table = np.zeros(1 << 12, dtype=np.int64)
        self.pool = np.zeros(1 << 16, dtype=np.uint8)
        self.offsets = np.zeros(1 << 12, dtype=np.int64)
        self.dropped = np.zeros(1 << 12, dtype=np.bool_)
        self.seen = np.full(1 << 12, -1, dtype=np.int64)
        self.tally = np.zeros(1 << 12, dtype=np.int64)
        self.info = np.zeros(4, dtype=np.int64)  # ids, pool bytes used, next output slot, stamp
        stop = sorted(w for w in STOPWORDS if len(w) > 1)
        self.profile([" ".join(stop).encode("ascii")])  # their ids come first, flagged dropped
        self.dropped[: int(self.info[0])] = True

    def _room(self, n_bytes: int) -> None:
        """Grow the per-id and pool arrays for up to ``n_bytes`` more text (a word takes two bytes)."""
        n_ids, used = int(self.info[0]), int(self.info[1])
        if used + n_bytes > self.pool.size:
            self.pool = np.concatenate([self.pool, np.zeros(max(self.pool.size, n_bytes), dtype=np.uint8)])
        need = n_ids + n_bytes // 2 + 2
        if need > self.offsets.size:
            more = max(self.offsets.size, need - self.offsets.size)
            self.offsets = np.concatenate([self.offsets, np.zeros(more, dtype=np.int64)])
            self.dropped = np.concatenate([self.dropped, np.zeros(more, dtype=np.bool_)])
            self.seen = np.concatenate([self.seen, np.full(more, -1, dtype=np.int64)])
            self.tally = np.concatenate([self.tally, np.zeros(more, dtype=np.int64)])

    def profile(self, texts: list[bytes]) -> list[WordProfile]:
        """The profiles of ``texts``: ASCII, or lower-cased UTF-8 (words as :func:`words` finds them)."""
        from pytest_restore.memory import kernels

        data, ends = kernels.pack(texts)
        self._room(data.size)
        ids = np.empty(data.size // 2 + 1, dtype=np.int32)
        counts = np.empty_like(ids)
        starts = np.zeros(len(texts) + 1, dtype=np.int64)
        totals = np.zeros(len(texts), dtype=np.int64)
        before = int(self.info[0])
        self.info[2] = 0
        done = 0
        with np.errstate(over="ignore"):  # the hash wraps by design (only seen without numba's JIT)
            while True:
                done = kernels.profile_texts(data, ends, done, self.table, self.pool, self.offsets, self.dropped,
                                             self.seen, self.tally, self.info, ids, counts, starts, totals)
                if done == len(texts):
                    break
                self.table = kernels.rehash(self.table, self.pool, self.offsets, int(self.info[0]), self.table.size * 2)
        base = int(self.offsets[before])
        new = self.pool[base : int(self.info[1])].tobytes()  # the bytes of this pass's new words only
        for wid in range(before, int(self.info[0])):
            word = new[self.offsets[wid] - base : self.offsets[wid + 1] - base].decode("ascii")
            _VOCABULARY[word] = wid
            _WORDS.append(word)  # ids are handed out in order from 0
        used = int(self.info[2])
        ids, counts = ids[:used].copy(), counts[:used].copy()  # the profiles are views of these
        bounds = starts.tolist()
        return [WordProfile(ids[a:b], counts[a:b], t) for a, b, t in zip(bounds, bounds[1:], totals.tolist())]


_TABLE: _WordTable | None = None
_TABLE_LOCK = threading.Lock()
#: Profiles by text, oldest first; at most ``_PROFILE_MEMO`` of them.
_PROFILES: dict[str, WordProfile] = {}
_PROFILE_MEMO = 1 << 18
#: Text profiled per compiled pass (a bound on the pass's scratch memory).
_CHUNK_BYTES = 256 << 10


def word_profiles(texts: Sequence[str]) -> list[WordProfile]:
    """The :class:`WordProfile` of each text (memoised; callers must not modify its arrays).

    Texts not seen before are profiled together, in compiled passes of a few
    hundred KB (one thread at a time). A non-ASCII text is lower-cased in
    Python first and profiled from its UTF-8 bytes.
    """
    memo = _PROFILES
    if any(t not in memo for t in texts):
        with _TABLE_LOCK:  # one pass at a time: the table's arrays are shared (and the pass runs without the GIL)
            _profile_new(texts)
    return [memo[t] if t in memo else word_profiles([t])[0] for t in texts]


def _profile_new(texts: Sequence[str]) -> None:
    """Profile the texts of ``texts`` the memo lacks, in compiled passes of about ``_CHUNK_BYTES``."""
    global _TABLE
    memo = _PROFILES
    todo = [t for t in dict.fromkeys(texts) if t not in memo]
    if todo:
        if _TABLE is None:
            _TABLE = _WordTable()
        batch: list[bytes] = []
        names: list[str] = []
        size = 0
        for k, text in enumerate(todo):
            # a non-ASCII text is lower-cased here (the rule's str.lower, which can make ASCII letters of
            # other ones); its UTF-8 bytes outside ASCII are all >= 0x80, never [a-z0-9], so the pass
            # finds exactly the regex's runs
            raw = text.encode("ascii") if text.isascii() else text.lower().encode("utf-8", "surrogatepass")
            batch.append(raw)
            names.append(text)
            size += len(raw)
            if size >= _CHUNK_BYTES or k == len(todo) - 1:
                memo.update(zip(names, _TABLE.profile(batch)))
                batch, names, size = [], [], 0
        while len(memo) > _PROFILE_MEMO:
            del memo[next(iter(memo))]


def word_profile(text: str) -> WordProfile:
    """The :class:`WordProfile` of one text (see :func:`word_profiles`)."""
    return word_profiles([text])[0]


def term_id(word: str) -> int:
    """The vocabulary id of ``word``, or -1 when no profiled text of this process has it."""
    return _VOCABULARY.get(word, -1)


def word_of(word_id: int) -> str:
    """The word a vocabulary id stands for (the inverse of :func:`term_id`)."""
    return _WORDS[word_id]


def word_ids(text: str) -> npt.NDArray[np.int32]:
    """The distinct content words of ``text`` as ascending vocabulary ids (see :class:`WordProfile`)."""
    return word_profile(text).ids


def word_id_rows(texts: Sequence[str]) -> list[npt.NDArray[np.int32]]:
    """:func:`word_ids` of each text, profiled together."""
    return [p.ids for p in word_profiles(texts)]
