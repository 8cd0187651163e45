"""A question's story: why it landed in its bin, from its records and the data file, without a model call.

Records keep units by their position in the question's history (the gold
units, what each condition injected, when each gold unit was evicted, the
gold's rank under the ranker); the texts come back from the data file the
run read, which is checked by its sha256 against ``summary.json``. Both
viewers read the story from here: ``python -m pytest_restore show`` prints it
(:func:`render_story_text`) and ``report.html`` opens it in the browser
(:mod:`pytest_restore.report.html`).

A context's units are marked the way the audit built it: **forced** units go
in whatever their rank (the oracle's and the restored condition's gold,
regime (a)'s surviving gold, or a memory system's held memories citing
gold), **ranked** ones were picked by the ranker over the store, and
**gold** units are the question's evidence. A memory system's regime-(b)
record also tells regime (a)'s context (``forced``): it is what tells a
distorted error from a recoverable one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import textwrap
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, overload

from pytest_restore.data.dataset import Dataset, Question
from pytest_restore.data.fields import DataError
from pytest_restore.data.units import Granularity, unit_contents
from pytest_restore.record import Record, ranker_of
from pytest_restore.report.inputs import RunInfo, record_order
from pytest_restore.stats.results import budget_label

if TYPE_CHECKING:  # the loaders are imported where a file is read
    from pytest_restore.data.loaders import DatasetRegistry

#: The conditions of a record, in the order a story tells them: (name, what it is).
CONDITIONS: tuple[tuple[str, str], ...] = (
    ("oracle", "the gold alone"),
    ("policy", "the policy's store"),
    ("restored", "the store with the evicted gold restored"),
)
#: A memory system's regime-(b) record also tells regime (a)'s context: it tells distorted from recoverable.
FORCED = ("forced", "the store with its memories citing gold forced (regime a's context)")


class StoryError(ValueError):
    """A story that cannot be told (no such question or cell, no data file); one line."""


# -- the data's texts --------------------------------------------------------------------


@dataclass(frozen=True)
class UnitText:
    """One unit of a history as a story shows it."""

    position: int
    session: int
    turn: int  #: -1 for a session unit
    date: str
    role: str
    content: str
    #: a derived memory's origin, ``memory of session 3, turns 2-5 (2023/05/20)`` (the record's ``memories.where``)
    label: str = ""

    @property
    def where(self) -> str:
        """``#12 session 3, turn 2 (2023/05/20, user)``; a derived memory: ``#412 memory of session 3, turns 2-5 (...)``."""
        if self.session < 0:
            return f"#{self.position} {self.label or 'derived memory'}"
        turn = f", turn {self.turn}" if self.turn >= 0 else ""
        return f"#{self.position} session {self.session}{turn} ({self.date}, {self.role})"


def history_texts(question: Question, granularity: Granularity) -> list[UnitText]:
    """A question's units in the audit's order (:func:`pytest_restore.data.units.history_units`), without token counts."""
    contents = unit_contents(question, granularity)
    out: list[UnitText] = []
    if granularity is Granularity.TURN:
        for s, (date, session) in enumerate(zip(question.haystack_dates, question.haystack_sessions)):
            for t, turn in enumerate(session):
                out.append(UnitText(len(out), s, t, date, turn.role, contents[len(out)]))
    else:
        for s, date in enumerate(question.haystack_dates):
            out.append(UnitText(s, s, -1, date, "session", contents[s]))
    return out


def open_data(
    info: RunInfo,
    data: str | os.PathLike[str] | None = None,
    loaders: DatasetRegistry | None = None,
    prepared: str | os.PathLike[str] | None = None,
) -> Dataset:
    """The data file the run read: ``data`` when given, else the one ``summary.json`` names.

    ``loaders``: the run's dataset loaders (a session's include those its conftest.py registered);
    default: the built-ins and installed packages'.

    The embedded default is generated again (deterministic) into the project's
    cache when it is not there. The file must be the run's: its sha256 is
    checked against ``summary.json``'s; a mismatch or a missing file is a
    one-line :class:`StoryError`. ``prepared`` is where the run keeps its
    prepared copy of the data (``.pytest_cache/d/restore/prepared``): the
    session's own report reads the copy instead of parsing the file again.
    """
    from pytest_restore.data.loaders import data_is_prepared, default_datasets, load_data

    settings = info.settings.audit if info.settings is not None else None
    name = (settings.data if settings is not None else None) or ""
    if data is not None:
        path = Path(data)
    elif not name or name == "embedded synthetic":
        path = _embedded(settings.embedded_questions if settings is not None else 100)
    else:
        path = Path(name)
        if not path.exists():
            raise StoryError(f"the run read {name}, which is not in {Path.cwd()}: pass --data PATH (the texts come from it)")
    want = str(info.dataset.get("sha256") or "")
    try:
        loader = str(info.dataset.get("dataset") or "") or None
        registry = loaders if loaders is not None else default_datasets()
        dataset = None
        if prepared is not None and data_is_prepared(path, prepared, registry):
            # the session prepared the file with the loader that fits it (no --restore-dataset): the same
            # questions when it is the loader the run names
            dataset = load_data(path, registry, cache_dir=prepared, prepare=False)
            dataset = dataset if loader is None or dataset.name == loader else None
        if dataset is None:
            dataset = load_data(path, registry, name=loader, cache_dir=prepared, prepare=False)
    except DataError as err:
        # a file the run's loader cannot read is most often not the run's file at all: say that first
        mismatch = _another_file(path, want, name)
        raise StoryError(mismatch or str(err)) from None
    if want and dataset.sha256 != want:
        raise StoryError(_another_file(path, want, name) or f"{path}: not the file the run read")
    return dataset


def _another_file(path: Path, want: str, name: str) -> str | None:
    """The line saying ``path`` is not the data the run read (its sha256 differs), or ``None``."""
    if not want:
        return None
    try:
        got = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    if got == want:
        return None
    read = f"{Path(name).name}, " if name and name != "embedded synthetic" else ""
    return (
        f"{path} is not the data this run read: its sha256 is {got[:16]}..., the run read "
        f"{read}sha256 {want[:16]}...: pass that file with --data"
    )


def _embedded(questions: int) -> Path:
    """The embedded default of this size: from the project's cache, generated there (or in a temporary directory)."""
    from pytest_restore.synthetic.embedded import embedded_dataset

    try:
        return embedded_dataset(Path(".pytest_cache") / "d" / "restore", questions=questions)
    except OSError:
        return embedded_dataset(Path(tempfile.mkdtemp(prefix="pytest-restore-")), questions=questions)


# -- a story ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """One unit of a context: where it is, and how it got there."""

    unit: UnitText
    gold: bool
    forced: bool

    @property
    def marks(self) -> str:
        """``gold, forced`` / ``ranked`` ..."""
        return ", ".join(x for x in ("gold" if self.gold else "", "forced" if self.forced else "ranked") if x)


@dataclass(frozen=True)
class ConditionView:
    """What one condition's reader saw, answered and was judged."""

    name: str
    about: str
    seen: tuple[Seen, ...] | None  #: ``None``: the record does not say (older records)
    tokens: int | None
    answer: str | None
    correct: bool | None


@dataclass(frozen=True)
class GoldView:
    """One gold unit in one cell: when it arrived, whether and when it was evicted, its rank."""

    unit: UnitText
    evicted_after: UnitText | None  #: the unit whose arrival evicted it; ``None``: kept (or not said)
    evicted: bool | None  #: ``None``: the record does not say
    rank: int | None  #: 1-based, under the ranker over the store; ``None``: evicted, not ranked or not said
    rank_known: bool = True  #: ``False``: the record does not say (older records)
    through_memories: bool = False  #: a memory system's store: kept means cited by a held memory

    @property
    def fate(self) -> str:
        """What became of it, in words (``kept in the store; rank 3 under the ranker``)."""
        if self.evicted is None:
            return "eviction not recorded"
        if not self.evicted:
            rank = (
                "its rank not recorded"
                if not self.rank_known
                else f"rank {self.rank} under the ranker"
                if self.rank is not None
                else "not ranked by the ranker (no match)"
            )
            if self.through_memories:
                return f"cited by a held memory; the best-ranked one citing it: {rank}"
            return f"kept in the store; {rank}"
        if self.through_memories:
            if self.evicted_after is None:
                return "no held memory cites it: its last citing memory went when the history ended"
            if self.evicted_after.position == self.unit.position:
                return "no memory ever cited it (nothing of it was kept as it arrived)"
            return f"no held memory cites it since {self.evicted_after.where} arrived"
        if self.evicted_after is None:
            return "evicted (when: not recorded)"
        return f"evicted when {self.evicted_after.where} arrived"


@dataclass(frozen=True)
class CellStory:
    """One record of the question: its cell, the gold's fate, the conditions, the bin."""

    record: Record
    gold: tuple[GoldView, ...]
    conditions: tuple[ConditionView, ...]

    @property
    def cell(self) -> str:
        """The grid item's name, ``fifo-80k``."""
        return cell_name(self.record)

    @property
    def title(self) -> str:
        """``fifo 80k, seed 0, regime b``."""
        r = self.record
        return f"{r.policy} {budget_label(r.budget)}, seed {r.seed}, regime {r.regime}"

    @property
    def outcome(self) -> str:
        """The bin, or why the record has none."""
        r = self.record
        if r.excluded:
            return f"excluded: {r.excluded}"
        if r.bin:
            return r.bin
        if r.conditions.oracle.correct is False:
            return "not oracle-answerable (no bin)"
        return "correct under the policy (no bin)"


@dataclass(frozen=True)
class Story:
    """A question's story over the cells its records cover."""

    question: Question
    gold: tuple[UnitText, ...]
    cells: tuple[CellStory, ...]


def cell_name(record: Record) -> str:
    """The grid item a record belongs to, as the grid names it (``fifo-80k``)."""
    return f"{record.policy}-{budget_label(record.budget)}"


def gold_positions(record: Record, question: Question, units: Sequence[UnitText]) -> tuple[int, ...]:
    """The gold's positions: the record's, else found again from the data (records before the field)."""
    if record.gold_positions is not None:
        return record.gold_positions
    from pytest_restore.data.units import gold_of

    # gold_of reads a unit's position, session and turn, which a UnitText has
    return gold_of(question, Granularity(record.granularity or "turn"), units)  # type: ignore[arg-type]


def _forced(record: Record, name: str, gold: Sequence[int], evicted: Iterable[int]) -> set[int]:
    """The units a condition forces in: the gold (oracle, restored), regime (a)'s held units citing gold, else none."""
    if name in ("oracle", "restored"):
        return set(gold)
    if name == "forced" or record.regime == "a":
        if record.memories is not None:  # a memory system: the held memories citing gold
            return set(record.memories.positions or ())
        return set(gold) - set(evicted)
    return set()


class _Units(Sequence[UnitText]):
    """A history's units, each made when a story first names it; a position past them is a memory a memory
    system derived (not in the data file).

    The same units as :func:`history_texts` lists, but a story names a few dozen of a history's hundreds
    (its gold, what its readers saw, the arrivals that evicted gold): the report's page tells every
    question's story, and listing every unit of every history was a fifth of its data's making.
    """

    def __init__(self, question: Question, granularity: Granularity) -> None:
        self.question = question
        self.turns = granularity is Granularity.TURN
        #: each session's first unit (turn units), then the history's length
        self.starts = [0]
        if self.turns:
            for session in question.haystack_sessions:
                self.starts.append(self.starts[-1] + len(session))
        else:
            self.starts.append(len(question.haystack_sessions))
        self.made: dict[int, UnitText] = {}

    def __len__(self) -> int:
        return self.starts[-1]

    @overload
    def __getitem__(self, position: int) -> UnitText: ...

    @overload
    def __getitem__(self, position: slice) -> list[UnitText]: ...

    def __getitem__(self, position: int | slice) -> UnitText | list[UnitText]:
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        made = self.made.get(position)
        if made is not None:
            return made
        n = len(self)
        p = position + n if position < 0 else position
        if not 0 <= p < n:
            raise IndexError("unit position out of range")
        q = self.question
        if self.turns:
            s = bisect_right(self.starts, p) - 1
            t = p - self.starts[s]
            turn = q.haystack_sessions[s][t]
            unit = UnitText(p, s, t, q.haystack_dates[s], turn.role, turn.content)
        else:
            unit = UnitText(p, p, -1, q.haystack_dates[p], "session", "\n".join(t.content for t in q.haystack_sessions[p]))
        self.made[position] = unit
        return unit

    def at(self, position: int, record: Record | None = None) -> UnitText:
        """The unit at ``position``; past them, a derived memory as ``record`` names it (if it cites gold)."""
        if position < len(self):
            return self[position]
        memories = record.memories if record is not None else None
        if memories is not None and position in (memories.positions or ()):
            i = (memories.positions or ()).index(position)
            label = memories.where[i] if memories.where else ""
            text = memories.texts[i] if memories.texts else ""
            return UnitText(position, -1, -1, "", "memory", text, label)
        if memories is not None and position in (memories.others or ()):
            i = (memories.others or ()).index(position)
            label = memories.others_where[i] if memories.others_where else ""
            text = memories.others_texts[i] if memories.others_texts else ""
            return UnitText(position, -1, -1, "", "memory", text, label)
        # records written before memories.others kept these texts
        return UnitText(position, -1, -1, "", "memory", "(a memory the memory system derived that cites no gold: its text is not recorded)")


def tell(records: Sequence[Record], question: Question) -> Story:
    """The story of one question from its records (all of one question), in the records' order."""
    granularity = Granularity(records[0].granularity or "turn") if records else Granularity.TURN
    units = _Units(question, granularity)
    gold = gold_positions(records[0], question, units) if records else ()
    # a unit of the history seen as gold or not, forced or not, is the same Seen in every context naming it
    seen_as: dict[tuple[int, bool, bool], Seen] = {}
    contexts: dict[tuple[tuple[int, ...], frozenset[int]], tuple[Seen, ...]] = {}
    cells = []
    for r in sorted(records, key=record_order):
        evicted = tuple(r.gold_evicted_units or ())
        after = r.gold_evicted_after or (None,) * len(gold)
        ranks = r.gold_ranks or (None,) * len(gold)
        fates = tuple(
            GoldView(
                units[g],
                units.at(a, r) if a is not None else None,
                None if r.gold_evicted_units is None else g in evicted,
                rank,
                r.gold_ranks is not None,
                r.memories is not None,
            )
            for g, a, rank in zip(gold, after, ranks)
        )
        conditions = []
        # a memory system's regime-(b) record: its bin also reads regime (a)'s context (distorted or recoverable)
        forced_too = r.memories is not None and r.regime == "b"
        for name, about in CONDITIONS + ((FORCED,) if forced_too else ()):
            answer, correct, tokens, injected = _condition(r, name)
            forced = _forced(r, name, gold, evicted)
            if injected is None:
                seen = None
            elif r.memories is None:
                # a store of the history's units: the same context (its units, the forced among them) is told
                # once per question and shared by every condition that read it (the oracle's in every cell)
                context = (injected, frozenset(forced))
                seen = contexts.get(context)
                if seen is None:
                    seen = contexts[context] = tuple(_seen(units, r, p, p in gold, p in forced, seen_as) for p in injected)
            else:
                seen = tuple(_seen(units, r, p, p in gold, p in forced, seen_as) for p in injected)
            conditions.append(
                ConditionView(
                    name if name != "policy" else f"policy (regime {r.regime})",
                    about if name != "policy" else _policy_about(r),
                    seen,
                    tokens if name != "oracle" else r.gold_tokens,
                    answer,
                    correct,
                )
            )
        cells.append(CellStory(r, fates, tuple(conditions)))
    return Story(question, tuple(units[g] for g in gold), tuple(cells))


def _seen(units: _Units, record: Record, position: int, gold: bool, forced: bool, seen_as: dict[tuple[int, bool, bool], Seen]) -> Seen:
    """The :class:`Seen` of ``position`` in a context of ``record``: one per (unit, gold, forced) of the history;
    a derived memory's is its record's own."""
    if position >= len(units):
        return Seen(units.at(position, record), gold, forced)
    key = (position, gold, forced)
    one = seen_as.get(key)
    if one is None:
        one = seen_as[key] = Seen(units[position], gold, forced)
    return one


def _condition(record: Record, name: str) -> tuple[str | None, bool | None, int | None, tuple[int, ...] | None]:
    """One condition's answer, verdict, injected tokens and injected positions."""
    if name == "forced":
        assert record.memories is not None
        c = record.memories.forced
    else:
        c = getattr(record.conditions, name)
    return c.answer, c.correct, c.injected_tokens, c.injected_positions


def _policy_about(record: Record) -> str:
    ranker = ranker_of(record)
    if record.regime == "a" and record.memories is not None:
        return f"the store: its memories citing gold forced, the rest ranked by {ranker}"
    if record.regime == "a":
        return f"the store: its surviving gold forced, the rest ranked by {ranker}"
    return f"the store, ranked by {ranker} (top-k under the cap)"


def select(
    records: Sequence[Record], question_id: str, cell: str | None = None
) -> list[Record]:
    """The records of one question (of one cell: ``fifo-80k``, ``fifo-80k-b`` for one regime); a miss is a :class:`StoryError`."""
    mine = [r for r in records if r.question_id == question_id]
    if not mine:
        raise StoryError(f"no record of question {question_id!r}")
    if cell is None:
        return mine
    chosen = [r for r in mine if cell in (cell_name(r), f"{cell_name(r)}-{r.regime}")]
    if not chosen:
        names = ", ".join(dict.fromkeys(cell_name(r) for r in mine))
        raise StoryError(f"question {question_id!r} has no record in cell {cell!r}; its cells: {names}")
    return chosen


# -- the terminal's view -----------------------------------------------------------------------


def _verdict(correct: bool | None) -> str:
    return {True: "correct", False: "wrong", None: "no verdict"}[correct]


def _clip(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def render_story_text(story: Story, *, width: int = 100, full: bool = False) -> str:
    """The story as plain text for a terminal: the question, its gold, then each record's cell.

    Units a reader saw are one line each (their text clipped to the line
    unless ``full``: then whole, under their line); gold units are printed
    whole once, under the question. A memory system's record also lists its
    held memories citing gold, whole, each with whether the policy's reader
    read it: the forced condition reads them all.
    """
    out = _story_head(story, width)
    wrap = textwrap.TextWrapper(width=width, initial_indent="      ", subsequent_indent="      ")
    for cell in story.cells:
        r = cell.record
        out += ["", f"== {cell.title}: {cell.outcome.upper()}"]
        out.append(
            f"  reader {r.reader}, judge {r.judge or '?'}, ranker {ranker_of(r)}; "
            f"store {r.store_units if r.store_units is not None else '?'} units, "
            f"{r.store_tokens if r.store_tokens is not None else '?'} tokens"
        )
        for fate in cell.gold:
            out.append(f"  gold {fate.unit.where}: arrived at #{fate.unit.position}; {fate.fate}")
        memories = r.memories
        if memories is not None and memories.positions is not None:
            out.append(f"  held memories citing gold: {len(memories.positions)} (the forced condition reads them all)")
            for i, position in enumerate(memories.positions):
                where = memories.where[i] if memories.where else "a derived memory"
                read = "" if not memories.injected else " [read under the policy]" if memories.injected[i] else " [not read under the policy]"
                out.append(f"    #{position} {where}{read}")
                out += wrap.wrap(memories.texts[i] if memories.texts else "(text not recorded)") or ["      (empty)"]
        for cond in cell.conditions:
            tokens = f", {cond.tokens} tokens" if cond.tokens is not None else ""
            count = _units(len(cond.seen)) if cond.seen is not None else "units not recorded"
            out.append(f"  {cond.name}: {cond.about} ({count}{tokens})")
            out.append(f"    answer ({_verdict(cond.correct)}): {_clip(cond.answer or '-', width - 30)}")
            for seen in cond.seen or ():
                head = f"    {'*' if seen.gold else ' '} {seen.unit.where} [{seen.marks}]"
                if full:
                    out += [head, *wrap.wrap(seen.unit.content)]
                else:
                    out.append(f"{head} {_clip(seen.unit.content, max(width - len(head) - 1, 40))}")
    return "\n".join(out) + "\n"


def _story_head(story: Story, width: int) -> list[str]:
    """The question, its reference and its gold, whole: what every view of a story opens with."""
    q = story.question
    wrap = textwrap.TextWrapper(width=width, initial_indent="    ", subsequent_indent="    ")
    out = [
        f"question {q.question_id} ({q.question_type}), asked {q.question_date}",
        f"  question:  {q.question}",
        f"  reference: {q.answer}",
        f"  gold: {_units(len(story.gold))}",
    ]
    for unit in story.gold:
        out.append(f"  [gold] {unit.where}")
        out += wrap.wrap(unit.content) or ["    (empty)"]
    return out


def render_story_summary(story: Story, *, width: int = 100) -> str:
    """The story in short: the question and its gold, then one line per record (its cell, bin, the gold
    evicted and each condition's verdict), and how to see one cell whole (``show --cell``)."""
    out = [*_story_head(story, width), "", f"{len(story.cells)} records, one a line (bin: gold evicted; verdicts):"]
    for cell in story.cells:
        r = cell.record
        evicted = sum(1 for g in cell.gold if g.evicted)
        verdicts = ", ".join(f"{c.name.split(' ')[0]} {_verdict(c.correct)}" for c in cell.conditions)
        out.append(
            f"  {cell.cell}-{r.regime} seed {r.seed}: {cell.outcome}: gold evicted {evicted} of {len(cell.gold)}; {verdicts}"
        )
    # the pointer names a binned record, regime (b)'s first: the headline regime
    first = min(
        (c for c in story.cells if c.record.bin), key=lambda c: c.record.regime != "b", default=None
    ) or (story.cells[0] if story.cells else None)
    if first is not None:
        out += [
            "",
            (
                f"one cell whole (every memory its readers saw, each text in full): python -m pytest_restore show "
                f"{story.question.question_id} --cell {first.cell}-{first.record.regime}; every cell whole: --full"
            ),
        ]
    return "\n".join(out) + "\n"


def _units(n: int) -> str:
    return f"{n} unit" if n == 1 else f"{n} units"
