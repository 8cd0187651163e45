"""Embeddings: texts to vectors, for the dense and hybrid rankers, each distinct text once per model.

An embedder is named like a chat model: ``fake`` (the offline stand-in) or
``PROVIDER:MODEL`` of a provider that declares ``embeddings`` (the built-in
``openai:MODEL``: OpenAI's API or any OpenAI-compatible ``/v1/embeddings``
endpoint: vLLM, llama.cpp, Ollama, text-embeddings-inference), reached with
the run's base URL, key (never stored or shown), pacing, adaptive
concurrency, retries and deadlines: :class:`ManagedEmbedder` is the managed
layer's (``managed.ManagedCalls``), as the chat models are.

**Batches.** The endpoint takes a list of inputs. A request carries at most
``max_inputs`` texts and (OpenAI's rule) at most ``max_request_tokens``
tokens in all; a text longer than ``max_tokens`` is **truncated**: it keeps
its leading o200k_base tokens up to 90% of ``max_tokens`` (the margin covers
the model's own tokenizer spending a few more tokens on the same English
text: OpenAI's embedders count with cl100k_base). Truncated texts are
counted (``EmbeddingStats.truncated``), never an error. An empty text gets
the zero vector without a call (the API refuses empty inputs). Limits by
model: the provider's declaration, else :data:`DEFAULT_LIMITS` (a local server's
own limit varies: ``--restore-embed-limits INPUTS,TOKENS``).

**Storage** (:class:`EmbeddingStore`). One directory per model under the
response cache, ``embeddings/<model>/``: ``vectors.bin`` holds one row per
text, the unit-length vector quantised to int8 with its float32 scale
(``x ~= q * scale``), and ``keys.bin`` is the index, the first 16 bytes of the
text's sha256 per row, in the same order. At 1,536 dimensions a row is 1,540
bytes against 6,144 as float32 (the ~155k distinct units of the 500-question
file: ~240 MB instead of ~950 MB); the quantisation moves a cosine by less
than 0.01 (``benches/bench_rankers.py`` measures it and the top-k agreement).
Readers map the file (``numpy.memmap``): the pages are the operating system's,
shared by every xdist worker, and a process only touches the rows of the
question it ranks. Rows are appended under an ``flock`` on the model's
directory, vectors first and then their keys (the commit point), so a reader
never sees a key without its vector, and a killed writer leaves rows that
are cut off at the next append.

**Once.** :class:`TextVectors` embeds only texts the store lacks, under the
model's lock, so processes that need the same texts (xdist workers, a rerun)
wait for one another instead of sending them again; an xdist controller
embeds every text ahead (``plugin``), and the workers then only read. A call
that still fails after its retries raises :class:`EmbeddingError` with one
line: a ranker with holes in it would not be the ranker the report names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from pytest_restore.models.cache import try_flock
from pytest_restore.models.managed import SPLIT, ManagedCalls

Vectors = npt.NDArray[np.float32]

#: Bumped when the store's layout changes (a new directory: old rows are not misread).
STORE_SCHEMA = 1
#: Dimensions of the fake embedder.
FAKE_DIMENSIONS = 256
#: Texts handed to the embedder at a time: their vectors are stored before the next lot is sent,
#: so a killed run keeps what it paid for.
CHUNK = 8192
#: Share of ``max_tokens`` a truncated text keeps (in o200k tokens): see the module docstring.
TRUNCATE_SHARE = 0.9


class EmbeddingError(RuntimeError):
    """An embedding call failed after its retries (or could not be made): the run stops, in one line."""


@dataclass(frozen=True)
class EmbeddingLimits:
    """What one request to an embeddings endpoint may carry."""

    #: texts per request
    max_inputs: int
    #: tokens per text (longer ones are truncated, see the module docstring)
    max_tokens: int
    #: tokens per request, all texts together (``None``: no such limit)
    max_request_tokens: int | None = None

    @staticmethod
    def of(known: EmbeddingLimits | None, override: tuple[int, int] | None = None) -> EmbeddingLimits:
        """The limits a model's requests keep to: ``override`` (inputs, tokens), else the known ones."""
        base = known or DEFAULT_LIMITS
        if override is None:
            return base
        return EmbeddingLimits(override[0], override[1], base.max_request_tokens)


#: A model its provider declares no limits for (a local server): small batches of short texts,
#: which every server takes.
DEFAULT_LIMITS = EmbeddingLimits(256, 512, None)


@dataclass
class EmbeddingStats:
    """What one process's embedder did."""

    #: distinct texts embedded (sent, or computed by the fake)
    embedded: int = 0
    #: of those, truncated to the model's input limit
    truncated: int = 0
    #: requests that came back with vectors
    requests: int = 0
    #: input tokens the server reported (0 for the fake)
    tokens: int = 0
    #: requests that timed out and were sent again as two halves
    split: int = 0


class Embedder(Protocol):
    """Texts to vectors: the fake or a real endpoint."""

    @property
    def name(self) -> str:
        """``fake`` or ``openai:MODEL``: the name the store and the ranker use."""
        ...

    @property
    def stats(self) -> EmbeddingStats:
        """What it did in this process."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, in order; raises :class:`EmbeddingError` when that cannot be done."""
        ...

    def embed_partial(self, texts: Sequence[str]) -> tuple[Vectors, npt.NDArray[np.bool_], str | None]:
        """The rows it could get, which of them those are, and the first failure (``None``: every row)."""
        ...

    def close(self) -> None:
        """Release connections (if any)."""
        ...


# -- the fake: hashed word and character n-grams -----------------------------------


class FakeEmbedder:
    """A deterministic offline embedder: what a small bag-of-n-grams encoder would give.

    A text's vector is the sum over its content words (the shared tokeniser)
    of a word vector, weighted ``1 + log(count)``, made unit length. A word's
    vector is the signed feature hashing (crc32) into :data:`FAKE_DIMENSIONS`
    of the word itself and of its character trigrams with boundary marks
    (``<re``, ``res``, ..., ``ts>``), so words that share a stem lie close,
    like a subword encoder's. It sees the text and nothing else (no labels,
    no gold, no question type); every process computes the same vectors.
    """

    name = "fake"

    def __init__(self, dimensions: int = FAKE_DIMENSIONS) -> None:
        self.dimensions = dimensions
        self.stats = EmbeddingStats()
        self._word_vectors: dict[int, Vectors] = {}
        self._table = np.zeros((0, dimensions), dtype=np.float32)
        self._growing = threading.Lock()

    def word_vector(self, word: str) -> Vectors:
        """The hashed vector of one word (itself and its boundary-marked trigrams)."""
        vector = np.zeros(self.dimensions, dtype=np.float32)
        marked = f"<{word}>"
        features = [word] + [marked[i : i + 3] for i in range(len(marked) - 2)]
        for feature in features:
            h = zlib.crc32(feature.encode("utf-8"))
            vector[h % self.dimensions] += 1.0 if (h >> 16) & 1 else -1.0
        vector[zlib.crc32(b"w:" + word.encode("utf-8")) % self.dimensions] += 2.0  # the whole word weighs more
        return vector

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length vectors (zero for a text without content words)."""
        from pytest_restore.memory.kernels import weighted_row_sums
        from pytest_restore.memory.lexical import word_profiles

        profiles = word_profiles(list(texts))
        sizes = np.fromiter((p.ids.size for p in profiles), dtype=np.int64, count=len(profiles))
        starts = np.zeros(len(profiles) + 1, dtype=np.int64)
        np.cumsum(sizes, out=starts[1:])
        ids = np.concatenate([p.ids for p in profiles] or [np.zeros(0, np.int32)]).astype(np.int64)
        weights = (1.0 + np.log(np.concatenate([p.counts for p in profiles] or [np.ones(0, np.int32)]))).astype(np.float32)
        out = weighted_row_sums(starts, ids, weights, self._vectors_for(ids))
        self.stats.embedded += len(texts)
        return _unit_rows(out)

    def embed_partial(self, texts: Sequence[str]) -> tuple[Vectors, npt.NDArray[np.bool_], str | None]:
        """Every row (the fake never fails)."""
        return self.embed(texts), np.ones(len(texts), dtype=bool), None

    def _vectors_for(self, ids: npt.NDArray[np.int64]) -> Vectors:
        """The word-vector table indexed by the process's word ids, grown to cover ``ids``."""
        from pytest_restore.memory.lexical import word_of

        top = int(ids.max()) + 1 if ids.size else 0
        # one grower at a time, from one snapshot: the gateway embeds on several threads, and a table
        # replaced between reading its size and copying it failed a request ("could not broadcast")
        with self._growing:
            table = self._table
            if top > table.shape[0]:
                grown = np.zeros((top, self.dimensions), dtype=np.float32)
                grown[: table.shape[0]] = table
                for i in range(table.shape[0], top):
                    grown[i] = self.word_vector(word_of(i))
                self._table = table = grown
        return table

    def close(self) -> None:
        """Nothing to release."""


# -- a real endpoint -----------------------------------------------------------------


class _NotSent(str):
    """A request not sent because the embedder stopped (not a failure of its own)."""


@dataclass
class _Batch:
    """One request's texts (already truncated) and where their vectors go."""

    positions: list[int]
    texts: list[str]
    tokens: int


class ManagedEmbedder(ManagedCalls):
    """An embedding model of any provider that declares ``embeddings``, managed.

    The managed layer's base URL and key handling (the key redacted from
    anything a server echoes), worker threads, rate meters, adaptive
    concurrency, backoff, ``Retry-After`` cap, deadline per attempt, replicas
    and failure accounting, as a chat model has; the provider's API says what
    the request looks like and how the answer is read. Texts are batched by
    :class:`EmbeddingLimits`.
    """

    def __init__(self, apis: Any, *, limits: EmbeddingLimits | None = None, **options: Any) -> None:
        """``apis``: the model's API per replica; ``options``: :class:`ManagedCalls`'.

        A server that answers none of ``max_tries`` attempts in a row within
        the timeout stops the embedder (``stall_after``): every request of a
        large file would otherwise wait out all its tries.
        """
        options.setdefault("stall_after", options.get("max_tries", 6))
        super().__init__(apis, **options)
        self.limits = limits or DEFAULT_LIMITS
        self.stats = EmbeddingStats()
        #: dimensions the server returned (``None`` before the first reply)
        self.dimensions: int | None = None

    def batches(self, texts: Sequence[str]) -> list[_Batch]:
        """``texts`` (non-empty ones) cut to the model's limits and grouped into requests."""
        from pytest_restore.data.tokens import count_tokens, encoding

        limits = self.limits
        keep = max(1, int(limits.max_tokens * TRUNCATE_SHARE))
        counts = count_tokens(texts)
        batches: list[_Batch] = []
        current = _Batch([], [], 0)
        for position, (text, tokens) in enumerate(zip(texts, counts)):
            if not text:
                continue
            if tokens > limits.max_tokens:
                text = encoding().decode(encoding().encode_ordinary(text)[:keep])
                tokens = keep
                self.stats.truncated += 1
            over_tokens = limits.max_request_tokens is not None and current.tokens + tokens > limits.max_request_tokens
            if current.texts and (len(current.texts) >= limits.max_inputs or over_tokens):
                batches.append(current)
                current = _Batch([], [], 0)
            current.positions.append(position)
            current.texts.append(text)
            current.tokens += tokens
        if current.texts:
            batches.append(current)
        return batches

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Unit-length vectors of ``texts``, batched and sent concurrently; one line when a batch fails."""
        vectors, _, error = self.embed_partial(texts)
        if error is not None:
            raise EmbeddingError(error)
        return vectors

    def embed_partial(self, texts: Sequence[str]) -> tuple[Vectors, npt.NDArray[np.bool_], str | None]:
        """The vectors of every request that succeeded, which rows those are, and the first failure (``None``: all).

        What was paid for is kept by the caller before it fails the run.
        """
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32), np.zeros(0, dtype=bool), None
        batches = self.batches(texts)
        if self.progress is not None:
            self.progress.add_total(len(batches))
        jobs = [(lambda stop, batch=batch: self._one_batch(batch, stop)) for batch in batches]
        replies = self._gather(jobs, "an embeddings request")
        dims = self.dimensions or 0
        out = np.zeros((len(texts), dims), dtype=np.float32)
        done = np.ones(len(texts), dtype=bool)  # an empty text's zero vector needs no call
        errors = []
        for batch, vectors in zip(batches, replies):
            if isinstance(vectors, _NotSent):
                done[batch.positions] = False
            elif isinstance(vectors, str):
                done[batch.positions] = False
                errors.append(vectors)
            else:
                out[batch.positions] = vectors
        self.stats.embedded += int(done.sum())
        if not errors and not done.all():
            errors.append(self.fatal_error or "interrupted")
        return _unit_rows(out), done, (f"embedder {self.name}: {errors[0]}" if errors else None)

    def _one_batch(self, batch: _Batch, stop: Any) -> Vectors | str:
        """One request's vectors, or why not; a request that fails stops the others not yet sent."""
        if stop.is_set() or self.fatal_error is not None:
            return _NotSent("not sent: another request of the embedder failed")
        try:
            reply = self._send(batch, stop)
        except Exception as exc:  # noqa: BLE001 - one bug must not hang the batch: it fails the run, said
            from pytest_restore.models.redact import redact_keys

            reply = redact_keys(f"internal error: {exc!r}")
        if isinstance(reply, str) and not isinstance(reply, _NotSent):
            self._count_failure(reply)
            stop.set()  # the run stops on it: what is not sent yet is not paid for
        if self.progress is not None:
            self.progress.record(failed=isinstance(reply, str))
        return reply

    def _send(self, batch: _Batch, stop: Any) -> Vectors | str:
        """One request through the managed retry loop: the vectors, or why not (never raises).

        A request of several texts that times out is not sent whole again:
        its two halves are (a slow server may take a small request in time),
        each of them the same way, down to one text, which is retried.
        """
        splittable = len(batch.texts) > 1
        outcome = self._post(
            lambda api: api.embeddings_request(batch.texts),
            lambda api, reply: self._read_vectors(api, reply, len(batch.texts)),
            stop,
            token_cost=batch.tokens,
            split_on_timeout=splittable,
            stop_on_failure=True,
        )
        if outcome.unsent:
            return _NotSent(outcome.error or "not sent")
        if outcome.value is not None:
            self.stats.requests += 1
            return cast(Vectors, outcome.value)
        if outcome.last_kind == SPLIT:
            self.stats.split += 1
            half = len(batch.texts) // 2
            parts = [
                _Batch(batch.positions[:half], batch.texts[:half], 0),
                _Batch(batch.positions[half:], batch.texts[half:], 0),
            ]
            for part in parts:
                part.tokens = batch.tokens * len(part.texts) // len(batch.texts)
            replies = [self._send(part, stop) for part in parts]
            for reply in replies:
                if isinstance(reply, str):
                    return reply
            return cast(Vectors, np.concatenate([cast(Vectors, r) for r in replies]))
        return str(outcome.error)

    def _read_vectors(self, api: Any, reply: Any, n: int) -> tuple[Vectors | None, str]:
        """The ``n`` vectors of a decoded reply, in input order, or ``None`` and why they are unusable."""
        read = api.read_embeddings(reply, n)
        if isinstance(read, str):
            return None, read
        rows, indexes, tokens = read
        twice = sorted(i for i, count in Counter(indexes).items() if count > 1)
        if twice:
            missing = sorted(set(range(n)) - set(indexes))
            lacking = f" and none for index {missing[0]}" if missing else ""
            return None, f"malformed response: index {twice[0]} given twice{lacking} ({len(indexes)} vectors for {n} inputs)"
        try:
            vectors = np.asarray([rows[i] for i in np.argsort(indexes, kind="stable")], dtype=np.float32)
        except (TypeError, ValueError) as exc:
            return None, f"malformed response: {type(exc).__name__}: {exc}"
        if vectors.ndim != 2 or vectors.shape[0] != n or sorted(indexes) != list(range(n)):
            return None, f"malformed response: {vectors.shape[0] if vectors.ndim else 0} vectors for {n} inputs"
        if vectors.shape[1] == 0:
            return None, "malformed response: empty vectors (0 dimensions)"
        if not np.isfinite(vectors).all():
            return None, "malformed response: a vector that is not finite"
        zero = np.flatnonzero(~vectors.any(axis=1))
        if zero.size:
            return None, f"malformed response: an all-zero vector for input {int(zero[0])} (it would rank nothing)"
        if self.dimensions is None:
            self.dimensions = int(vectors.shape[1])
        elif vectors.shape[1] != self.dimensions:
            return None, f"malformed response: {vectors.shape[1]} dimensions after {self.dimensions}"
        self.stats.tokens += tokens
        return vectors, ""


def _unit_rows(vectors: Vectors) -> Vectors:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1)
    np.divide(vectors, norms[:, None], out=vectors, where=norms[:, None] > 0)
    return vectors


# -- the store: one file of int8 rows per model, and its index -------------------------


def text_key(text: str) -> bytes:
    """A text's row key: the first 16 bytes of its sha256."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def store_dir_name(embedder_name: str) -> str:
    """A model's directory name: its name made safe for a path, plus a short digest of the exact name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", embedder_name)[:60]
    return f"{safe}-{hashlib.sha256(embedder_name.encode()).hexdigest()[:8]}-v{STORE_SCHEMA}"


@dataclass
class EmbeddingStore:
    """One model's vectors on disk (``vectors.bin``, int8 rows with a scale) and their index (``keys.bin``)."""

    directory: Path
    _rows: dict[bytes, int] = field(default_factory=dict, repr=False)
    _keys_read: int = field(default=0, repr=False)
    _dims: int | None = field(default=None, repr=False)
    _map: np.memmap[Any, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def vectors_path(self) -> Path:
        """The rows."""
        return self.directory / "vectors.bin"

    @property
    def keys_path(self) -> Path:
        """The index: 16 bytes of sha256 per row, in row order."""
        return self.directory / "keys.bin"

    @property
    def dimensions(self) -> int | None:
        """The vectors' dimensions (``None`` while the store is empty)."""
        if self._dims is None:
            try:
                self._dims = int(json.loads((self.directory / "meta.json").read_text())["dimensions"])
            except (OSError, ValueError, KeyError, TypeError):
                return None
        return self._dims

    def _row_dtype(self, dims: int) -> np.dtype[Any]:
        return np.dtype([("q", np.int8, (dims,)), ("scale", "<f4")])

    def refresh(self) -> None:
        """Read the index rows other processes appended since the last look."""
        try:
            with open(self.keys_path, "rb") as handle:
                handle.seek(self._keys_read * 16)
                data = handle.read()
        except FileNotFoundError:
            return
        whole = len(data) // 16
        for i in range(whole):
            self._rows.setdefault(data[i * 16 : (i + 1) * 16], self._keys_read + i)
        if whole:
            self._keys_read += whole
            self._map = None

    def __len__(self) -> int:
        return self._keys_read

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and text_key(text) in self._rows

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts of ``texts`` with no row, in first-use order."""
        self.refresh()
        return [t for t in dict.fromkeys(texts) if text_key(t) not in self._rows]

    def vectors(self, texts: Sequence[str]) -> Vectors:
        """The stored vectors of ``texts`` as float32 (unit length up to the quantisation); every one must be stored."""
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        keys = [text_key(t) for t in texts]
        if any(k not in self._rows for k in keys):
            self.refresh()  # rows another process (or another store object) appended
        rows = np.fromiter((self._rows[k] for k in keys), dtype=np.int64, count=len(keys))
        table = self._table()
        picked = table[rows]
        out: Vectors = picked["q"].astype(np.float32) * picked["scale"][:, None]
        return out

    def _table(self) -> np.memmap[Any, Any]:
        if self._map is None or self._map.shape[0] < self._keys_read:
            dims = self.dimensions
            assert dims is not None
            self._map = np.memmap(self.vectors_path, dtype=self._row_dtype(dims), mode="r", shape=(self._keys_read,))
        return self._map

    @contextlib.contextmanager
    def locked(self, poll: float = 0.05) -> Iterator[None]:
        """The model's append lock (across processes), waited for."""
        path = self.directory / "append.lock"
        while (lock := try_flock(path)) is None:
            time.sleep(poll)
            poll = min(poll * 1.5, 0.5)
        with lock:
            yield

    def append(self, texts: Sequence[str], vectors: Vectors) -> None:
        """Store the rows of ``texts`` (distinct, not stored yet); the caller holds :meth:`locked`."""
        if not len(texts):
            return
        self.refresh()
        dims = int(vectors.shape[1])
        known = self.dimensions
        if known is None:
            (self.directory / "meta.json").write_text(json.dumps({"dimensions": dims, "schema": STORE_SCHEMA, "format": "int8 row + float32 scale"}))
            self._dims = known = dims
        if dims != known:
            raise EmbeddingError(
                f"the embedder returned {dims} dimensions but {self.directory} holds {known}: "
                "the model changed under its name; remove that directory"
            )
        dtype = self._row_dtype(dims)
        peak = np.abs(vectors).max(axis=1)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        rows = np.zeros(len(texts), dtype=dtype)
        rows["q"] = np.rint(vectors / scale[:, None]).astype(np.int8)
        rows["scale"] = scale
        committed = self._keys_read * dtype.itemsize
        # a killed writer may have left vectors without keys: cut them off before appending
        with open(self.vectors_path, "ab") as handle:
            handle.truncate(committed)
            handle.write(rows.tobytes())
        with open(self.keys_path, "ab") as handle:
            handle.truncate(self._keys_read * 16)
            handle.write(b"".join(text_key(t) for t in texts))
        self.refresh()

    def nbytes(self) -> int:
        """Bytes on disk (rows and index)."""
        return sum(p.stat().st_size for p in (self.vectors_path, self.keys_path) if p.exists())


class TextVectors:
    """An embedder and its store: each distinct text embedded once, then read from disk (the dense ranker's source)."""

    def __init__(self, embedder: Embedder, cache_dir: Path, *, say: Any = None) -> None:
        """``cache_dir`` is the response cache's directory; the store is its ``embeddings/<model>``."""
        self.embedder = embedder
        self.name = embedder.name
        self.store = EmbeddingStore(Path(cache_dir) / "embeddings" / store_dir_name(embedder.name))
        self.say = say

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts not embedded yet."""
        return self.store.missing(texts)

    def ensure(self, texts: Sequence[str]) -> int:
        """Embed every text of ``texts`` not stored yet (under the model's lock); how many were embedded here."""
        if not self.store.missing(texts):
            return 0
        done = 0
        with self.store.locked():
            todo = self.store.missing(texts)  # another process may have embedded them while we waited
            if todo and self.say is not None:
                self.say(f"embedding {len(todo):,} distinct texts with {self.name}{_deadline(self.embedder)} ...")
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start : start + CHUNK]
                vectors, got, error = self.embedder.embed_partial(chunk)
                # what was paid for is kept before anything fails: a rerun sends only the rest
                self.store.append([t for t, ok in zip(chunk, got) if ok], vectors[got])
                done += int(got.sum())
                if error is not None:
                    left = len(todo) - done
                    raise EmbeddingError(f"{error} ({done:,} texts' vectors kept; a rerun sends the other {left:,})")
        return done

    def vectors(self, texts: Sequence[str]) -> Vectors:
        """The vectors of ``texts`` (embedded first when need be)."""
        self.ensure(texts)
        return self.store.vectors(texts)

    def close(self) -> None:
        """Release the embedder's connections."""
        self.embedder.close()


def _deadline(embedder: Embedder) -> str:
    """How long the embedder may wait, in words (nothing for the fake, which does not wait)."""
    if not isinstance(embedder, ManagedCalls):
        return ""
    return (
        f" (each request answered within {embedder.timeout:g}s or sent again in halves; "
        f"{embedder.stall_after} unanswered in a row stop the run)"
    )


# -- names --------------------------------------------------------------------------


#: Ranker families that read embeddings: ``dense:EMBEDDER`` and ``hybrid:EMBEDDER``.
EMBEDDING_RANKERS = ("dense", "hybrid")


def embedder_of(ranker: str) -> str | None:
    """The embedder a ranker name reads (``dense:fake`` -> ``fake``), or ``None`` for another ranker."""
    family, colon, embedder = ranker.partition(":")
    return embedder if colon and family in EMBEDDING_RANKERS and embedder else None
