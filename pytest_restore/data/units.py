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
import marshal
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pytest_restore.data.dataset import Question
from pytest_restore.data.tokens import count_in_processes, count_tokens, remember_counts


class Granularity(str, Enum):
    """What one memory unit is."""

    TURN = "turn"
    SESSION = "session"


@dataclass(frozen=True, slots=True)
class Unit:
    """One memory unit, as a store holds it. Carries nothing that reveals gold.

    Slotted: a full dataset makes a unit per turn, 211,910 over the 500-question file in every process that
    prepares it, at about 100 bytes a unit rather than 370 with an instance dictionary.
    """

    position: int  #: chronological index in the history
    session: int  #: index of the session in the haystack
    turn: int  #: turn index in the session, -1 for a session unit
    date: str
    role: str  #: ``user``/``assistant``; ``session`` for a session unit
    content: str  #: the raw text (a session unit joins its turns)
    snippet: str  #: what the reader sees
    tokens: int  #: o200k_base tokens of the snippet

    if not TYPE_CHECKING:  # for the type checker a Unit has its fields only

        def __getattr__(self, name: str) -> str:
            # a turn unit of history_units leaves its snippet slot empty: its header and content make it when it
            # is read (a full dataset's snippets would repeat every turn's text: ~160 MB over 500 questions)
            if name == "snippet":
                return turn_header(self.date, self.role) + self.content
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


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


# the slots' own setters, taken once: a frozen dataclass's __init__ goes through object.__setattr__ for each field
_SET_UNIT = tuple(getattr(Unit, name).__set__ for name in ("position", "session", "turn", "date", "role", "content", "tokens"))


def _turn_unit(position: int, session: int, turn: int, date: str, role: str, content: str, tokens: int) -> Unit:
    """A turn's ``Unit(...)``, its snippet made when read (``turn_header`` and the content: not kept twice), and
    without the frozen dataclass's eight ``object.__setattr__`` calls.

    A full dataset makes a unit per turn, so their construction is on the preparation's path.
    """
    unit = object.__new__(Unit)
    set_position, set_session, set_turn, set_date, set_role, set_content, set_tokens = _SET_UNIT
    set_position(unit, position)
    set_session(unit, session)
    set_turn(unit, turn)
    set_date(unit, date)
    set_role(unit, role)
    set_content(unit, content)
    set_tokens(unit, tokens)
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

    Gold at turn granularity: the turns the question's ``evidence`` names or,
    without it, the ``has_answer`` turns of the answer sessions; at session
    granularity: the sessions holding those turns (the answer sessions).
    """
    units, sizes = history_units(question, granularity)
    return History(question, granularity, units, sizes, gold_of(question, granularity, units))


def history_units(
    question: Question, granularity: Granularity, sizes: Sequence[int] | None = None
) -> tuple[tuple[Unit, ...], npt.NDArray[np.int64]]:
    """The units of a question's haystack, in order, and their token sizes (nothing of the gold).

    ``sizes``: each unit's size, made by another process (:func:`unit_sizes`, in the shared texts file): no
    count is looked up here.
    """
    units: list[Unit] = []
    if granularity is Granularity.TURN:
        rows: list[tuple[int, int, str, str, str]] = []
        for s, (date, session) in enumerate(zip(question.haystack_dates, question.haystack_sessions)):
            for t, turn in enumerate(session):
                rows.append((s, t, date, turn.role, turn.content))
        if sizes is None:
            sizes = _snippet_sizes([turn_header(date, role) for _, _, date, role, _ in rows], [r[4] for r in rows])
        for pos, ((s, t, date, role, content), size) in enumerate(zip(rows, sizes, strict=True)):
            units.append(_turn_unit(pos, s, t, date, role, content, size))
    else:
        snippets = [
            render_session(date, ((turn.role, turn.content) for turn in session))
            for date, session in zip(question.haystack_dates, question.haystack_sessions)
        ]
        contents = unit_contents(question, granularity)
        for s, (snippet, size) in enumerate(zip(snippets, count_tokens(snippets) if sizes is None else sizes, strict=True)):
            date = question.haystack_dates[s]
            units.append(Unit(s, s, -1, date, "session", contents[s], snippet, size))
    sizes_arr = np.fromiter((u.tokens for u in units), dtype=np.int64, count=len(units))
    return tuple(units), sizes_arr


def unit_sizes(question: Question, granularity: Granularity, counts: Mapping[str, int]) -> list[int]:
    """Each unit's size from the counts of its :func:`distinct_texts` (``counts``), by :func:`history_units`' rule:
    what an xdist controller writes for its workers, so that they look up no count to build a history."""
    if granularity is Granularity.SESSION:
        return [
            counts[render_session(date, ((turn.role, turn.content) for turn in session))]
            for date, session in zip(question.haystack_dates, question.haystack_sessions)
        ]
    sizes = []
    for date, session in zip(question.haystack_dates, question.haystack_sessions):
        for turn in session:
            header, content = turn_header(date, turn.role), turn.content
            sizes.append(counts[header] + counts[content] if adds_to_header(content) else counts[header + content])
    return sizes


def gold_of(question: Question, granularity: Granularity, units: Sequence[Unit]) -> tuple[int, ...]:
    """The positions of a question's gold units among ``units`` (its history's), ascending."""
    if question.evidence is not None:
        if granularity is Granularity.SESSION:
            return tuple(sorted({s for s, _ in question.evidence}))
        at = {(u.session, u.turn): u.position for u in units}
        return tuple(sorted(at[st] for st in question.evidence if st in at))
    answer_ids = set(question.answer_session_ids)
    if granularity is Granularity.SESSION:
        return tuple(s for s, sid in enumerate(question.haystack_session_ids) if sid in answer_ids)
    gold: list[int] = []
    pos = 0
    for sid, session in zip(question.haystack_session_ids, question.haystack_sessions):
        in_answer = sid in answer_ids
        for turn in session:
            if in_answer and turn.has_answer:
                gold.append(pos)
            pos += 1
    return tuple(gold)


def unit_contents(question: Question, granularity: Granularity = Granularity.TURN) -> list[str]:
    """The ``content`` of each of a question's units, in order, without building its history.

    A turn unit's content is the turn's text; a session unit's joins its
    turns' texts with newlines.
    """
    if granularity is Granularity.TURN:
        return [turn.content for session in question.haystack_sessions for turn in session]
    return ["\n".join(turn.content for turn in session) for session in question.haystack_sessions]


def has_gold(question: Question, granularity: Granularity = Granularity.TURN) -> bool:
    """Whether :func:`build_history` would mark any gold unit for ``question`` (without building it)."""
    if question.evidence is not None:
        return bool(question.evidence)  # the loader keeps only references that name a turn
    answer_ids = set(question.answer_session_ids)
    for sid, session in zip(question.haystack_session_ids, question.haystack_sessions):
        if sid in answer_ids and (granularity is Granularity.SESSION or any(t.has_answer for t in session)):
            return True
    return False


def adds_to_header(content: str) -> bool:
    """Whether a turn's snippet counts as its header's tokens plus its content's: not where the content starts
    with a newline or '/', which the tokenizer may join to the header's end (the whole snippet is counted then)."""
    return not content.startswith(("\n", "\r", "/"))


def first_of_each_history(questions: Sequence[Question]) -> list[Question]:
    """``questions`` without the later questions of a history another one asked first (a LoCoMo conversation)."""
    seen: set[str] = set()
    out = []
    for q in questions:
        if q.history_key not in seen:
            seen.add(q.history_key)
            out.append(q)
    return out


def distinct_texts(questions: Sequence[Question], granularity: Granularity = Granularity.TURN) -> list[str]:
    """Every text whose token count the units of ``questions`` are made of, once each, in first-use order.

    At turn granularity: each turn header, and each content (or, for a
    content whose count is not additive, the whole snippet); at session
    granularity: each rendered session. The order is the same in every
    process that reads the same questions.
    """
    texts: dict[str, None] = {}  # insertion order: the same list in every process
    for q in first_of_each_history(questions):  # a shared history's texts are listed once
        if granularity is Granularity.TURN:
            for date, session in zip(q.haystack_dates, q.haystack_sessions):
                for turn in session:
                    header = turn_header(date, turn.role)
                    texts[header] = None
                    if adds_to_header(turn.content):
                        texts[turn.content] = None
                    else:
                        texts[header + turn.content] = None
        else:
            for date, session in zip(q.haystack_dates, q.haystack_sessions):
                texts[render_session(date, ((t.role, t.content) for t in session))] = None
    return list(texts)


def build_histories(
    questions: Sequence[Question],
    granularity: Granularity = Granularity.TURN,
    *,
    counts_file: str | os.PathLike[str] | None = None,
    sizes: Mapping[str, Sequence[int]] | None = None,
) -> list[History]:
    """:func:`build_history` of every question, their distinct texts counted once, up front.

    With ``counts_file``, the counts are read from there when it exists (no
    text is encoded: the tokenizer is not even loaded) and written there when
    it does not, atomically, as a ``marshal`` mapping of text to count. The
    caller keys the file by the dataset's sha256, the granularity and the
    code (see :func:`counts_file_name`). ``sizes``: each history's unit sizes by
    history key, made by another process (the shared texts file): no text is listed or counted.
    """
    if sizes is None:
        texts = distinct_texts(questions, granularity)
        if counts_file is None:
            count_tokens(texts)
        else:
            _count_cached(texts, Path(counts_file))
    # questions asked of one history (a LoCoMo conversation) share its units: cut once
    shared: dict[str, tuple[tuple[Unit, ...], npt.NDArray[np.int64]]] = {}
    histories = []
    for q in questions:
        key = q.history_key
        if key not in shared:
            shared[key] = history_units(q, granularity, None if sizes is None else sizes[key])
        units, unit_sizes = shared[key]
        histories.append(History(q, granularity, units, unit_sizes, gold_of(q, granularity, units)))
    return histories


def count_ahead(
    questions: Sequence[Question],
    granularity: Granularity,
    counts_file: str | os.PathLike[str],
    starting: Callable[[int], None] | None = None,
    processes: int = 1,
    texts: Sequence[str] | None = None,
    meanwhile: Callable[[], None] | None = None,
) -> list[int]:
    """The token count of every distinct text of ``questions``, in order, left in ``counts_file``.

    What :func:`build_histories` reads from the file, made ahead of it (by
    an xdist controller, once, before its workers build their histories,
    over ``processes`` processes: see :func:`count_in_processes`, which runs
    ``meanwhile`` while they count). A file that holds every count already
    is read (``meanwhile`` then runs at once). ``starting`` hears the number
    of texts before they are counted; ``texts``: their :func:`distinct_texts`,
    when the caller has listed them.
    """
    if texts is None:
        texts = distinct_texts(questions, granularity)
    known = read_counts(texts, counts_file)
    if known is not None:
        if meanwhile is not None:
            meanwhile()
        return known
    if starting is not None:
        starting(len(texts))
    counts = count_in_processes(texts, processes, meanwhile)
    _write_counts(counts_file, dict(zip(texts, counts)))
    return counts


def counts_file_name(dataset_sha256: str, granularity: Granularity) -> str:
    """The name of a dataset's token-count cache file: data, granularity and code all in the key."""
    from pytest_restore.data import tokens

    code = hashlib.sha256(Path(__file__).read_bytes() + Path(tokens.__file__).read_bytes()).hexdigest()
    key = hashlib.sha256(f"{dataset_sha256}\x1f{granularity.value}\x1f{code}".encode()).hexdigest()
    return f"token-counts-{key[:24]}.marshal"


def _count_cached(texts: list[str], counts_file: Path) -> None:
    """Make every count of ``texts`` known to this process, through the counts file.

    When the file exists and holds every text, it is all this reads.
    Otherwise the texts are counted here and the file is (re)written,
    atomically: processes that start together on a cold cache each count,
    and whichever writes last leaves the same counts.
    """
    known = _complete_counts(texts, counts_file)
    if known is not None:
        # keyed by this process's strings: the file's are a second copy of every text, let go here
        remember_counts({t: known[t] for t in texts})
        return
    counts = count_tokens(texts)
    _write_counts(counts_file, dict(zip(texts, counts)))


def read_counts(texts: Sequence[str], counts_file: str | os.PathLike[str]) -> list[int] | None:
    """The count of each of ``texts`` from ``counts_file``, when it holds every one; else ``None``."""
    known = _complete_counts(texts, counts_file)
    return None if known is None else [known[t] for t in texts]


def _complete_counts(texts: Sequence[str], counts_file: str | os.PathLike[str]) -> dict[str, int] | None:
    """The counts file's mapping when it holds every one of ``texts``; else ``None`` (they must be counted)."""
    known = _read_counts(counts_file)
    return known if known is not None and all(t in known for t in texts) else None


def _read_counts(file: str | os.PathLike[str]) -> dict[str, int] | None:
    try:
        data = marshal.loads(Path(file).read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def _write_counts(file: str | os.PathLike[str], counts: dict[str, int]) -> None:
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
    additive = [adds_to_header(c) for c in contents]
    content_counts = count_tokens([c for c, ok in zip(contents, additive) if ok])
    whole_counts = count_tokens([h + c for h, c, ok in zip(headers, contents, additive) if not ok])
    sizes: list[int] = []
    it_content, it_whole = iter(content_counts), iter(whole_counts)
    for header, ok in zip(headers, additive):
        sizes.append(header_counts[header] + next(it_content) if ok else next(it_whole))
    return sizes
