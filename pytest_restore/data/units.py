"""Memory units and gold: a question's history cut into the pieces a store holds.

A turn unit is one turn of one session; a session unit is a whole session.
Units are in chronological order: (session position, turn index). The reader
sees a unit as its rendered snippet: the session date, the role and the
content. Session ids and ``has_answer`` flags never reach the snippet: gold is
kept beside the units, in :attr:`History.gold`, where no policy looks.

A unit's size is the o200k_base token count of its snippet. The turn header
ends in ``":\\n"``, which the o200k pre-tokeniser always closes as a piece of
its own, so a turn snippet's count is exactly the header's count plus the
content's count (unless the content starts with a newline or ``/``). Contents
are shared by many questions, so each distinct content is counted once.
"""

from __future__ import annotations

import hashlib
import itertools
import marshal
import os
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
import numpy.typing as npt

from pytest_restore.data.dataset import Question
from pytest_restore.data.tokens import count_tokens, remember_counts


class Granularity(str, Enum):
    """What one memory unit is."""

    TURN = "turn"
    SESSION = "session"


@dataclass(frozen=True)
class Unit:
    """One memory unit, as a store holds it. Carries nothing that reveals gold."""

    position: int  #: chronological index in the history
    session: int  #: index of the session in the haystack
    turn: int  #: turn index in the session, -1 for a session unit
    date: str
    role: str  #: ``user``/``assistant``; ``session`` for a session unit
    content: str  #: the raw text (a session unit joins its turns)
    snippet: str  #: what the reader sees
    tokens: int  #: o200k_base tokens of the snippet


@dataclass(frozen=True)
class History:
    """A question's units in order, their sizes, and its gold set ``G_q``."""

    question: Question
    granularity: Granularity
    units: tuple[Unit, ...]
    sizes: npt.NDArray[np.int64] = field(repr=False, compare=False)
    gold: tuple[int, ...]  #: positions of the gold units, ascending

    @property
    def total_tokens(self) -> int:
        """Token size of the whole history."""
        return int(self.sizes.sum())

    @property
    def gold_tokens(self) -> int:
        """Token size of ``G_q``."""
        return int(self.sizes[list(self.gold)].sum()) if self.gold else 0


def _unit(position: int, session: int, turn: int, date: str, role: str, content: str, snippet: str, tokens: int) -> Unit:
    """``Unit(...)``, without the frozen dataclass's eight ``object.__setattr__`` calls.

    A full dataset has ~250k units per process: this halves their cost.
    """
    unit = object.__new__(Unit)
    unit.__dict__.update(
        position=position, session=session, turn=turn, date=date, role=role, content=content, snippet=snippet, tokens=tokens
    )
    return unit


def turn_header(date: str, role: str) -> str:
    """The line that introduces a turn snippet."""
    return f"[{date}] {role}:\n"


def render_session(date: str, turns: Iterable[tuple[str, str]]) -> str:
    """A whole session as one snippet."""
    body = "\n".join(f"{role}: {content}" for role, content in turns)
    return f"[{date}] session:\n{body}"


def build_history(question: Question, granularity: Granularity = Granularity.TURN) -> History:
    """Cut one question's haystack into units and mark its gold.

    Gold at turn granularity: the ``has_answer`` turns of the answer sessions;
    at session granularity: the answer sessions themselves.
    """
    answer_ids = set(question.answer_session_ids)
    units: list[Unit] = []
    gold: list[int] = []
    if granularity is Granularity.TURN:
        rows: list[tuple[int, int, str, str, str, bool]] = []
        for s, (sid, date, session) in enumerate(
            zip(question.haystack_session_ids, question.haystack_dates, question.haystack_sessions)
        ):
            in_answer = sid in answer_ids
            for t, turn in enumerate(session):
                rows.append((s, t, date, turn.role, turn.content, in_answer and turn.has_answer))
        headers = [turn_header(date, role) for _, _, date, role, _, _ in rows]
        contents = [content for *_, content, _ in rows]
        sizes = _snippet_sizes(headers, contents)
        for pos, ((s, t, date, role, content, is_gold), header, size) in enumerate(
            zip(rows, headers, sizes)
        ):
            units.append(_unit(pos, s, t, date, role, content, header + content, size))
            if is_gold:
                gold.append(pos)
    else:
        snippets: list[str] = []
        for s, (sid, date, session) in enumerate(
            zip(question.haystack_session_ids, question.haystack_dates, question.haystack_sessions)
        ):
            pairs = [(turn.role, turn.content) for turn in session]
            snippets.append(render_session(date, pairs))
            if sid in answer_ids:
                gold.append(s)
        for s, (snippet, size) in enumerate(zip(snippets, count_tokens(snippets))):
            date = question.haystack_dates[s]
            content = "\n".join(turn.content for turn in question.haystack_sessions[s])
            units.append(Unit(s, s, -1, date, "session", content, snippet, size))
    sizes_arr = np.fromiter((u.tokens for u in units), dtype=np.int64, count=len(units))
    return History(question, granularity, tuple(units), sizes_arr, tuple(gold))


def distinct_texts(questions: Sequence[Question], granularity: Granularity = Granularity.TURN) -> list[str]:
    """Every text whose token count the units of ``questions`` are made of, once each, in first-use order.

    At turn granularity: each turn header, and each content (or, for a
    content whose count is not additive, the whole snippet); at session
    granularity: each rendered session. The order is the same in every
    process that reads the same questions.
    """
    texts: dict[str, None] = {}  # insertion order: the same list in every process
    for q in questions:
        if granularity is Granularity.TURN:
            for date, session in zip(q.haystack_dates, q.haystack_sessions):
                for turn in session:
                    header = turn_header(date, turn.role)
                    texts[header] = None
                    if turn.content.startswith(("\n", "\r", "/")):
                        texts[header + turn.content] = None
                    else:
                        texts[turn.content] = None
        else:
            for date, session in zip(q.haystack_dates, q.haystack_sessions):
                texts[render_session(date, ((t.role, t.content) for t in session))] = None
    return list(texts)


def build_histories(
    questions: Sequence[Question],
    granularity: Granularity = Granularity.TURN,
    *,
    counts_file: str | os.PathLike[str] | None = None,
) -> list[History]:
    """:func:`build_history` of every question, their distinct texts counted once, up front.

    With ``counts_file``, the counts are read from there when it exists (no
    text is encoded: the tokenizer is not even loaded) and written there when
    it does not, atomically, as a ``marshal`` mapping of text to count. The
    caller keys the file by the dataset's sha256, the granularity and the
    code (see :func:`counts_file_name`). Processes that prepare the same
    file at the same time (xdist workers on a cold cache) split the counting
    between them: see :func:`_count_shared`.
    """
    texts = distinct_texts(questions, granularity)
    if counts_file is None:
        count_tokens(texts)
    else:
        _count_shared(texts, Path(counts_file))
    return [build_history(q, granularity) for q in questions]


def counts_file_name(dataset_sha256: str, granularity: Granularity) -> str:
    """The name of a dataset's token-count cache file: data, granularity and code all in the key."""
    from pytest_restore.data import tokens

    code = hashlib.sha256(Path(__file__).read_bytes() + Path(tokens.__file__).read_bytes()).hexdigest()
    key = hashlib.sha256(f"{dataset_sha256}\x1f{granularity.value}\x1f{code}".encode()).hexdigest()
    return f"token-counts-{key[:24]}.marshal"


#: How many pieces the distinct texts are cut into for sharing the counting.
COUNT_SHARDS = 32
#: The longest a process waits for another's shard before counting it itself.
SHARD_WAIT_SECONDS = 600.0


def _count_shared(texts: list[str], counts_file: Path) -> None:
    """Make every count of ``texts`` known to this process, sharing the work with its peers.

    The counts file, when it exists and holds every text, is all it reads.
    Otherwise the texts are cut into :data:`COUNT_SHARDS` runs (shards).
    The process walks them in order and claims each free one with an
    exclusive ``flock`` (the response cache's locking): it counts a claimed
    shard and writes its counts beside the counts file, atomically, before
    it lets go. Shards another process held are read once it has written
    them. So two workers that start together each count about half, and a
    worker that starts late reads what is done and counts what is left.

    A shard file holds the shard's counts in order under a fingerprint of
    its texts (their number, total UTF-8 length and CRC-32) and is used only
    when the reader's own shard has the same fingerprint, so a file is
    compact (no copy of the texts) and a process whose texts differ (another
    subset of questions under the same file name) does not take its counts.
    A shard whose holder died (the kernel drops its ``flock``), a file that
    cannot be read or written, or a wait past :data:`SHARD_WAIT_SECONDS`
    just means this process counts those texts itself. The last step writes
    the whole counts file (if no peer has yet) and removes the shard files.
    """
    from pytest_restore.models.cache import is_flocked, try_flock

    known = _read_counts(counts_file)
    if known is not None and all(t in known for t in texts):
        remember_counts(known)
        return
    stale = known is not None or counts_file.exists()  # incomplete or damaged: to be rewritten
    try:
        counts_file.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        count_tokens(texts)
        return
    # contiguous runs: neighbouring texts share words, and the encoder is ~6% faster on them than strided
    bounds = [len(texts) * i // COUNT_SHARDS for i in range(COUNT_SHARDS + 1)]
    shards = [texts[a:b] for a, b in itertools.pairwise(bounds)]
    paths = [counts_file.with_name(f"{counts_file.name}.shard{i:02d}") for i in range(COUNT_SHARDS)]
    pending: list[int] = []
    for i, (shard, path) in enumerate(zip(shards, paths)):
        lock_path = path.with_name(f"{path.name}.lock")
        try:
            lock = try_flock(lock_path)
        except OSError:
            lock = None
        if lock is None:
            pending.append(i)
            continue
        with lock:
            done = _read_shard(path, shard)
            if done is not None:
                remember_counts(done)
            else:
                _write_counts(path, (_fingerprint(shard), count_tokens(shard)))
    for i in pending:
        path, shard = paths[i], shards[i]
        lock_path = path.with_name(f"{path.name}.lock")
        deadline = time.monotonic() + SHARD_WAIT_SECONDS
        while (done := _read_shard(path, shard)) is None and is_flocked(lock_path) and time.monotonic() < deadline:
            time.sleep(0.005)
        if done is None:  # its holder died, or a peer already merged the shards
            done = _read_counts(counts_file)
        if done is not None:
            remember_counts(done)
    counts = count_tokens(texts)  # encodes only what no shard or peer gave
    if stale or not counts_file.exists():  # a file a peer wrote meanwhile holds these very texts
        _write_counts(counts_file, dict(zip(texts, counts)))
    for path in paths:
        try:
            path.unlink()
        except OSError:
            pass


def _read_counts(file: str | os.PathLike[str]) -> dict[str, int] | None:
    try:
        data = marshal.loads(Path(file).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def _fingerprint(texts: Sequence[str]) -> tuple[int, int, int]:
    """(number, total UTF-8 bytes, CRC-32) of ``texts`` in order: what a shard file is checked against."""
    data = "\x1f".join(texts).encode("utf-8", "surrogatepass")
    return len(texts), len(data), zlib.crc32(data)


def _read_shard(file: Path, shard: Sequence[str]) -> dict[str, int] | None:
    """The counts of ``shard`` from a shard file written for the very same texts, else ``None``."""
    try:
        data = marshal.loads(file.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(data, tuple) and len(data) == 2 and data[0] == _fingerprint(shard)):
        return None
    counts = data[1]
    if not (isinstance(counts, list) and len(counts) == len(shard)):
        return None
    return dict(zip(shard, counts))


def _write_counts(file: str | os.PathLike[str], counts: dict[str, int] | tuple[tuple[int, int, int], list[int]]) -> None:
    """``marshal`` ``counts`` to ``file`` atomically; a failure is ignored (the cache only saves time)."""
    path = Path(file)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(counts))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs time


def _snippet_sizes(headers: Sequence[str], contents: Sequence[str]) -> list[int]:
    """Exact token counts of ``header + content``, counting shared pieces once."""
    distinct_headers = list(dict.fromkeys(headers))
    header_counts = dict(zip(distinct_headers, count_tokens(distinct_headers)))
    additive = [not c.startswith(("\n", "\r", "/")) for c in contents]
    content_counts = count_tokens([c for c, ok in zip(contents, additive) if ok])
    whole_counts = count_tokens([h + c for h, c, ok in zip(headers, contents, additive) if not ok])
    sizes: list[int] = []
    it_content, it_whole = iter(content_counts), iter(whole_counts)
    for header, ok in zip(headers, additive):
        sizes.append(header_counts[header] + next(it_content) if ok else next(it_whole))
    return sizes
