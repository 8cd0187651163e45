"""Lexical analysis shared by the redundancy policy and the BM25-lite ranker.

Tokenisation: lower-case, split into runs of ASCII letters and digits, drop a
fixed list of English stopwords and one-character tokens. No stemming: the
ranker is a frozen lexical baseline, and a stemmer would be one more thing a
reader of the report has to trust.

Question texts are split in Python (:func:`pytest_restore.data.words.words`). Unit texts, hundreds of
thousands of them, are profiled in compiled passes over their bytes into
word-id and count arrays (:func:`word_profiles`), with the same words.

Every process of a run profiles the same unit texts: an xdist controller
profiles them once (:func:`profile_csr`, its own vocabulary) into a file every
worker maps (``memory/shared_texts.py``); a worker takes that vocabulary as its
own (:func:`install_shared`), so the file's word ids are its ids, and reads a
text's profile off the file's arrays instead of profiling it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
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


@dataclass(frozen=True, slots=True)
class ProfileRows:
    """The word profiles of a list of texts end to end (compressed rows): text ``k``'s ids and counts are
    the ``sizes[k]`` entries after the first ``sizes[:k].sum()``, ``totals[k]`` its content words."""

    ids: npt.NDArray[np.int32]
    counts: npt.NDArray[np.int32]
    sizes: npt.NDArray[np.int64]
    totals: npt.NDArray[np.int64]


class _WordTable:
    """A vocabulary as arrays, for the compiled profiler (``kernels.profile_texts``).

    Profiling text word by word in Python makes a string object of every
    word of the file only to count and drop most of them. The compiled pass reads
    the bytes and looks each word up in an exact table (bytes compared, not
    only hashes); ``vocabulary`` and ``words`` (the process-wide table's:
    :data:`_VOCABULARY`, :data:`_WORDS`) mirror the table's new words after
    every pass, so :func:`term_id` and the memo stay plain Python.
    """

    def __init__(self, vocabulary: dict[str, int], by_id: list[str]) -> None:
        self.vocabulary = vocabulary
        self.words = by_id
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
        rows = self.rows(texts)
        ids, counts = rows.ids.copy(), rows.counts.copy()  # the profiles are views of these (not of the scratch)
        bounds = [0, *np.cumsum(rows.sizes).tolist()]
        return [WordProfile(ids[a:b], counts[a:b], t) for a, b, t in zip(bounds, bounds[1:], rows.totals.tolist())]

    def rows(self, texts: list[bytes]) -> ProfileRows:
        """:meth:`profile` of ``texts`` as compressed rows (views of this pass's scratch arrays)."""
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
            self.vocabulary[word] = wid
            self.words.append(word)  # ids are handed out in order from 0
        used = int(self.info[2])
        return ProfileRows(ids[:used], counts[:used], np.diff(starts), totals)


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
    Python first and profiled from its UTF-8 bytes. A text of the shared
    profiles (:func:`install_shared`) is read off them, not memoised.
    """
    memo = _PROFILES
    shared = _SHARED
    rows = shared.rows if shared is not None else {}
    if any(t not in memo and t not in rows for t in texts):
        with _TABLE_LOCK:  # one pass at a time: the table's arrays are shared (and the pass runs without the GIL)
            _profile_new([t for t in texts if t not in rows])
    out = []
    for t in texts:
        row = rows.get(t)
        if row is not None and shared is not None:
            out.append(shared.profile(row))
        else:
            out.append(memo[t] if t in memo else word_profiles([t])[0])
    return out


def profile_rows(texts: Sequence[str]) -> ProfileRows:
    """The word profiles of ``texts`` end to end (:class:`ProfileRows`): gathered from the shared profiles'
    arrays when they hold every text (no object per text), else from :func:`word_profiles`."""
    shared = _SHARED
    if shared is not None:
        rows = shared.rows
        try:
            at = np.fromiter((rows[t] for t in texts), dtype=np.int64, count=len(texts))
        except KeyError:
            pass  # a text the controller did not profile (a derived memory, say): profiled here
        else:
            return shared.gather(at)
    profiles = word_profiles(texts)
    n = len(profiles)
    return ProfileRows(
        np.concatenate([p.ids for p in profiles]) if n else np.zeros(0, dtype=np.int32),
        np.concatenate([p.counts for p in profiles]) if n else np.zeros(0, dtype=np.int32),
        np.fromiter((p.ids.size for p in profiles), dtype=np.int64, count=n),
        np.fromiter((p.total for p in profiles), dtype=np.int64, count=n),
    )


def _raw(text: str) -> bytes:
    """What the compiled pass reads of ``text``: its ASCII bytes, or a non-ASCII text lower-cased (the rule's
    str.lower, which can make ASCII letters of other ones) as UTF-8, whose bytes outside ASCII are all >= 0x80,
    never [a-z0-9], so the pass finds exactly the regex's runs."""
    return text.encode("ascii") if text.isascii() else text.lower().encode("utf-8", "surrogatepass")


def _chunks(texts: Sequence[str]) -> Iterator[tuple[Sequence[str], list[bytes]]]:
    """``texts`` in consecutive runs of about ``_CHUNK_BYTES`` of what the compiled pass reads (:func:`_raw`),
    each with those bytes: one compiled pass a run."""
    start, batch, size = 0, [], 0
    for k, text in enumerate(texts):
        raw = _raw(text)
        batch.append(raw)
        size += len(raw)
        if size >= _CHUNK_BYTES or k == len(texts) - 1:
            yield texts[start : k + 1], batch
            start, batch, size = k + 1, [], 0


def _profile_new(texts: Sequence[str]) -> None:
    """Profile the texts of ``texts`` the memo lacks, in compiled passes of about ``_CHUNK_BYTES``."""
    global _TABLE
    memo = _PROFILES
    todo = [t for t in dict.fromkeys(texts) if t not in memo]
    if todo:
        if _TABLE is None:
            _TABLE = _WordTable(_VOCABULARY, _WORDS)
        for names, batch in _chunks(todo):
            memo.update(zip(names, _TABLE.profile(batch)))
        while len(memo) > _PROFILE_MEMO:
            del memo[next(iter(memo))]


class SharedProfiles:
    """Word profiles made by another process, as compressed rows (arrays mapped from its file): text
    ``texts[k]``'s ids and counts are ``ids[offsets[k]:offsets[k+1]]``, ``counts[...]``, its content words
    ``totals[k]``; ids of the vocabulary it was made with (:func:`install_shared` makes it this process's)."""

    def __init__(
        self,
        texts: Sequence[str],
        offsets: npt.NDArray[np.int64],
        ids: npt.NDArray[np.int32],
        counts: npt.NDArray[np.int32],
        totals: npt.NDArray[np.int32],
    ) -> None:
        #: text -> its row (the keys are the caller's strings: no second copy of a text)
        self.rows: dict[str, int] = {t: k for k, t in enumerate(texts)}
        self.offsets, self.ids, self.counts, self.totals = offsets, ids, counts, totals

    def profile(self, row: int) -> WordProfile:
        """Row ``row`` as a :class:`WordProfile` (views of the shared arrays)."""
        a, b = int(self.offsets[row]), int(self.offsets[row + 1])
        return WordProfile(self.ids[a:b], self.counts[a:b], int(self.totals[row]))

    def gather(self, rows: npt.NDArray[np.int64]) -> ProfileRows:
        """Rows ``rows``, in that order, end to end (copies)."""
        starts = self.offsets[rows]
        sizes = self.offsets[rows + 1] - starts
        # each entry's place in the shared arrays: its row's start, plus how far into the row it is
        ends = np.cumsum(sizes)
        where = np.arange(int(ends[-1]) if ends.size else 0, dtype=np.int64) + np.repeat(starts - (ends - sizes), sizes)
        return ProfileRows(self.ids[where], self.counts[where], sizes, self.totals[rows].astype(np.int64))


_SHARED: SharedProfiles | None = None


def profile_csr(texts: Sequence[str]) -> tuple[list[str], ProfileRows]:
    """The profiles of ``texts`` (distinct) as compressed rows, by a vocabulary of their own, and its words
    by id: what another process takes up with :func:`install_shared`. The ids are this pass's, not this
    process's (its memo and vocabulary are left as they were)."""
    table = _WordTable({}, [])
    parts: list[ProfileRows] = []
    for _, batch in _chunks(texts):
        rows = table.rows(batch)
        parts.append(ProfileRows(rows.ids.copy(), rows.counts.copy(), rows.sizes, rows.totals))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return table.words, ProfileRows(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), empty, empty)
    return table.words, ProfileRows(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("ids", "counts", "sizes", "totals")))


def install_shared(by_id: Sequence[str], shared: SharedProfiles) -> bool:
    """Make ``by_id`` (words by id: :func:`profile_csr`'s) this process's vocabulary and read the texts of
    ``shared`` off it from now on; whether it could (the process's vocabulary so far must be a start of
    ``by_id``: a process that profiled other texts first keeps its own ids and profiles every text itself)."""
    global _TABLE, _SHARED
    with _TABLE_LOCK:
        if _TABLE is None:
            _TABLE = _WordTable(_VOCABULARY, _WORDS)
        have = len(_WORDS)
        if have > len(by_id) or list(by_id[:have]) != _WORDS:
            return False
        if have < len(by_id):
            # the missing words, in id order, as one text: the pass hands each its id in order of first occurrence
            _TABLE.profile([" ".join(by_id[have:]).encode("ascii")])
        if _WORDS != list(by_id):  # a word the pass would not make (not [a-z0-9]+, a stopword, one repeated)
            raise ValueError("shared vocabulary does not profile to itself")
        _SHARED = shared
        return True


def uninstall_shared() -> None:
    """Profile every text in this process again (the vocabulary taken up stays)."""
    global _SHARED
    _SHARED = None


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
