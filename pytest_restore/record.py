"""The per-question record: its schema, reading and writing, the N rule and the bins.

One :class:`Record` per (question, policy, budget, seed, regime, reader). The
audit produces records, the statistics and the report consume them, and
``python -m pytest_restore report`` reads them back through
:func:`pytest_restore.records_file.read_records`. Everything a consumer needs to know about a record lives
here:

- the fields and their types (:data:`FIELDS`, the dataclass itself);
- which records enter a cell's ``N`` (:attr:`Record.enters_n`);
- the bins (:data:`BINS`) and the rule that assigns them (:func:`bin_of`);
- the cell a record belongs to (:class:`CellKey`).

Counting records is the statistics' work (:mod:`pytest_restore.stats.tally`).

A record is read by attribute: the identifiers and the gold at its top, each
reader condition one :class:`Condition` (``record.conditions.policy.correct``),
the restore-tightness ablations one optional :class:`Ablations`. Records cross
xdist workers as plain JSON objects of the same shape (:meth:`Record.to_json`,
:meth:`Record.from_json`); files of schema version 1 (one flat object per
record) are migrated when read (:mod:`pytest_restore.records_file`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, NamedTuple, TypeVar

BINS: tuple[str, ...] = ("irreversible", "recoverable", "distorted", "residual")
REGIMES: tuple[str, ...] = ("a", "b")
#: The ranker of records written before records named theirs.
DEFAULT_RANKER = "bm25-lite"

#: The reader conditions of a record, in the order a record holds them (:class:`Conditions`).
CONDITIONS: tuple[str, ...] = ("oracle", "policy", "restored")
#: The restore-tightness ablations: (key, title); :meth:`Ablations.verdict` reads a key's verdict.
ABLATIONS: tuple[tuple[str, str], ...] = (
    ("surviving", "(i) surviving gold only, G ∩ S_P"),
    ("store", "(ii) complete retained store, no cap"),
    ("placebo", "(iii) length/position-matched placebo"),
)



class CellKey(NamedTuple):
    """What makes a grid cell: the records of one cell are counted and tested together.

    The grid's dimensions, each a record field. A new dimension (a ranker, a
    dataset) is a field here (with the record field it is read from in
    :meth:`of`) and a place in :func:`pytest_restore.stats.results.cell_order`;
    the analysis and every renderer read cells through this key. Read its
    fields by name: the ranker dimension made it five long (empty ``ranker``
    for every cell of a one-ranker run).
    """

    policy: str
    budget: int
    regime: str
    reader: str
    #: the ranker, when the run compared several (``--restore-rankers``) and this is not the
    #: baseline one (:func:`baseline_ranker`); "" for the baseline's cells and every one-ranker run
    ranker: str = ""

    @classmethod
    def of(cls, record: Record, baseline: str | None = None) -> CellKey:
        """The cell a record belongs to; ``baseline`` is the run's baseline ranker when it compared several."""
        ranker = ranker_of(record)
        return cls(
            record.policy,
            record.budget,
            record.regime,
            record.reader,
            "" if baseline is None or ranker == baseline else ranker,
        )


def ranker_of(record: Record) -> str:
    """The ranker a record was read with (records older than the field used BM25-lite)."""
    return record.ranker or DEFAULT_RANKER


def baseline_ranker(records: Iterable[Record]) -> str | None:
    """The ranker the others are compared with when the records hold several: ``bm25-lite`` when
    present (the protocol's), else the first by name; ``None`` for one ranker."""
    rankers = sorted({ranker_of(r) for r in records})
    if len(rankers) < 2:
        return None
    return DEFAULT_RANKER if DEFAULT_RANKER in rankers else rankers[0]

#: The version of the record schema this package writes (``summary.json``'s ``record_schema``,
#: beside ``records.jsonl``). Version 1 (a flat object per record; also every file written
#: before there was a version) is migrated when read (:func:`pytest_restore.records_file.migrate_v1`); any other version is
#: refused in one line (:func:`check_schema_version`). Adding a field that reads as null when
#: absent keeps the version; changing what a field means, moving or dropping one raises it.
SCHEMA_VERSION = 2
#: The versions :func:`pytest_restore.records_file.read_records` reads.
READ_VERSIONS: tuple[int, ...] = (1, 2)
#: The fields that identify a record: no two records of one run share them.
KEY_FIELDS: tuple[str, ...] = ("question_id", "policy", "budget", "seed", "regime", "reader")


class RecordError(ValueError):
    """A record that breaks the schema; ``str(err)`` is one line naming the field."""


# -- validation --------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_verdict(value: Any) -> bool:
    return value is None or isinstance(value, bool)


def _list_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or isinstance(v, (list, tuple)) and all(check(x) for x in v)


_STR, _OPT_STR, _INT, _OPT_INT = (
    (_is_str, "a string"),
    (_optional(_is_str), "a string or null"),
    (_is_int, "an integer"),
    (_optional(_is_int), "an integer or null"),
)
_VERDICT = (_is_verdict, "true, false or null")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_REGIME = (lambda v: v in REGIMES, "'a' or 'b'")
_BIN = (lambda v: v is None or v in BINS, "'irreversible', 'recoverable', 'distorted', 'residual' or null")
_GRANULARITY = (lambda v: v is None or v in ("turn", "session"), "'turn', 'session' or null")
_INT_LIST = (_list_of(_is_int), "a list of integers or null")
_OPT_INT_LIST = (_list_of(_optional(_is_int)), "a list of integers and nulls, or null")
_OPT_SHARE = (
    lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1),
    "a number in [0, 1] or null",
)
_TOKEN_PAIR = (
    lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_int(x) and x >= 0 for x in v)),
    "a list [input, output] of two token counts, or null",
)
_TOKEN_SHARE = (
    lambda v: v is None
    or (
        isinstance(v, (list, tuple))
        and len(v) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0 for x in v)
    ),
    "a list [input, output] of two non-negative token counts, or null",
)
_SCORE_COUNTS = (
    lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) == 10 and all(_is_int(x) and x >= 0 for x in v)),
    "a list of 10 counts or null",
)
_TIE_COUNTS = (
    lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_int(x) and x >= 0 for x in v) and v[1] <= v[0]),
    "a list [units, tied] of two counts (tied at most units), or null",
)
_STR_LIST = (_list_of(_is_str), "a list of strings or null")
_BOOL_LIST = (_list_of(lambda v: isinstance(v, bool)), "a list of true/false or null")
_STR_MAP_REQUIRED = (
    lambda v: isinstance(v, dict) and all(_is_str(x) for x in v.values()),
    "an object of strings",
)


def _field(kind: tuple[Callable[[Any], bool], str], meaning: str, *, required: bool = True) -> Any:
    """One record field's declaration: its check, what a valid value is, and what it means.

    A field added after the first release is not ``required``: it reads as null when absent.
    """
    check, want = kind
    metadata = {"check": check, "want": want, "meaning": meaning}
    return field(metadata=metadata) if required else field(default=None, metadata=metadata)


def _object(cls: type, meaning: str, *, required: bool = True) -> Any:
    """A field holding one typed object (a :class:`Condition`, the :class:`Ablations`), declared by its class.

    Its own fields are declared on ``cls``; a field that is not ``required`` reads as null when absent.
    """
    metadata = {"object": cls, "want": "an object" if required else "an object or null", "meaning": meaning}
    return field(metadata=metadata) if required else field(default=None, metadata=metadata)


@dataclass(frozen=True)
class Condition:
    """One reader condition of a record: the reader's answer, the judge's verdict and the context's size.

    The oracle condition injects the gold alone and carries no sizes (null).
    """

    correct: bool | None = _field(_VERDICT, "the judge's verdict on the answer (null: excluded, or the call failed)")
    answer: str | None = _field(_OPT_STR, "the reader's answer", required=False)
    prompt: str | None = _field(_OPT_STR, "first 16 hex of the sha256 of the reader request", required=False)
    injected_tokens: int | None = _field(
        _OPT_INT, "tokens injected into the reader's context (null for the oracle)", required=False
    )
    injected_units: int | None = _field(_OPT_INT, "units injected (null for the oracle)", required=False)
    injected_positions: tuple[int, ...] | None = _field(
        _INT_LIST, "the injected units by position in the history (their id), in the order the reader saw them",
        required=False,
    )
    f1: float | None = _field(
        _OPT_SHARE, "LoCoMo's token F1 of the answer against the reference, by its category's rule (null: no answer)",
        required=False,
    )
    bleu1: float | None = _field(_OPT_SHARE, "BLEU-1 of the answer against the reference (null: no answer)", required=False)
    reader_tokens: tuple[int, int] | None = _field(
        _TOKEN_PAIR, "tokens [in, out] of the reader's call for this answer (null: the call failed)", required=False
    )
    judge_tokens: tuple[int, int] | None = _field(
        _TOKEN_PAIR, "tokens [in, out] of the judge's call on this answer (null: no verdict)", required=False
    )
    tokens_estimated: bool | None = _field(
        _VERDICT,
        "true: a model reported no usage and its tokens are estimated (o200k counts); null: no reader call",
        required=False,
    )


@dataclass(frozen=True)
class Conditions:
    """The three reader conditions of a record (the protocol's section 5)."""

    oracle: Condition = _object(Condition, "the reader with the gold alone (null verdict: the call failed)")
    policy: Condition = _object(Condition, "the reader with the policy's store (null verdict when excluded)")
    restored: Condition = _object(Condition, "the reader with the store plus the evicted gold restored")

    def by_name(self) -> tuple[tuple[str, Condition], ...]:
        """Each condition with its name, in :data:`CONDITIONS` order."""
        return (("oracle", self.oracle), ("policy", self.policy), ("restored", self.restored))


@dataclass(frozen=True)
class Ablations:
    """The three restore-tightness ablations of a regime-(b) irreversible record (``--restore-ablations``)."""

    excluded: Mapping[str, str] = _field(_STR_MAP_REQUIRED, "{}: all ran; else ablation -> why it has no verdict")
    surviving_correct: bool | None = _field(
        _VERDICT, "(i) G_q ∩ S_P forced, S_P ranked (regime a's context)", required=False
    )
    store_correct: bool | None = _field(_VERDICT, "(ii) all of S_P forced, no cap", required=False)
    placebo_correct: bool | None = _field(
        _VERDICT, "(iii) a nearby non-gold placebo forced in the gold's place", required=False
    )
    store_tokens: int | None = _field(_OPT_INT, "tokens injected by (ii)", required=False)
    placebo_units: tuple[int, ...] | None = _field(_INT_LIST, "the placebo's positions", required=False)
    placebo_tokens: int | None = _field(_OPT_INT, "the placebo's tokens", required=False)

    def verdict(self, key: str) -> bool | None:
        """The verdict of the ablation ``key`` (one of :data:`ABLATIONS`); ``None``: it has none."""
        verdicts = {"surviving": self.surviving_correct, "store": self.store_correct, "placebo": self.placebo_correct}
        return verdicts[key]


@dataclass(frozen=True)
class GoldMemories:
    """What a memory system holding derived memories kept of the gold: the held memories that cite it.

    Null on a record of a store of raw units, where they are the surviving gold units themselves.
    """

    positions: tuple[int, ...] | None = _field(
        _INT_LIST, "each held memory citing a gold unit: its position (after the history's units)"
    )
    where: tuple[str, ...] | None = _field(_STR_LIST, "each as 'memory of session S, turns T-U (date)'")
    texts: tuple[str, ...] | None = _field(_STR_LIST, "each one's text, as the reader sees it")
    injected: tuple[bool, ...] | None = _field(_BOOL_LIST, "whether each was in the policy condition's context")
    forced: Condition = _object(
        Condition, "the reader with these memories forced and the store ranked (regime a's context)"
    )
    gold_injected: tuple[bool, ...] | None = _field(
        _BOOL_LIST,
        "per gold unit (as gold_positions), whether some held memory citing it was in the policy condition's "
        "context (the retrieval figures' at-the-cap recall)",
        required=False,
    )
    others: tuple[int, ...] | None = _field(
        _INT_LIST,
        "each derived memory citing no gold that a condition's reader saw (policy, restored or forced): its "
        "position, ascending (null: not recorded, records before the field)",
        required=False,
    )
    others_where: tuple[str, ...] | None = _field(
        _STR_LIST, "each as 'memory of session S, turns T-U (date)'", required=False
    )
    others_texts: tuple[str, ...] | None = _field(
        _STR_LIST, "each one's text, as the reader sees it (what crowds the context when retrieval missed)", required=False
    )


@dataclass(frozen=True)
class Record:
    """One question under one policy, budget, seed, regime and reader.

    Each field is declared once, here and on :class:`Conditions`,
    :class:`Condition` and :class:`Ablations`: its type, its check, what a
    valid value is and what it means (the field's metadata, read by
    :data:`FIELDS`, :data:`MEANINGS`, :func:`check` and
    :func:`schema_markdown`, which generates ``docs/DESIGN.md``'s tables).
    Required fields come first; the rest read as null when absent.
    """

    question_id: str = _field(_STR, "the question")
    question_type: str = _field(_STR, "its LongMemEval type")
    policy: str = _field(_STR, "eviction policy (registry name)")
    budget: int = _field(_INT, "memory budget in tokens (no-evict carries the cell's budget)")
    seed: int = _field(_INT, "the policy's seed (0 for deterministic policies)")
    regime: str = _field(_REGIME, "a = forced surviving gold, b = top-k retrieval")
    reader: str = _field(_STR, "reader model name")
    conditions: Conditions = _object(Conditions, "the reader's answer and verdict in each condition")
    negative_restore_gain: bool = _field(_BOOL, "policy right, restored wrong")
    gold_units: int = _field(_INT, "size of G_q, the gold units")
    gold_evicted: int | None = _field(_OPT_INT, "gold units not in the store (null when there is no store)")
    bin: str | None = _field(_BIN, "only oracle-answerable policy errors are binned (see bin_of)")
    excluded: str | None = _field(_OPT_STR, "why the record is out of N (a failed model call), else null")
    # -- null when absent ------------------------------------------------------------
    judge: str | None = _field(_OPT_STR, "judge model name", required=False)
    scorer: str | None = _field(_OPT_STR, "importance scorer name, null unless the policy uses it", required=False)
    ranker: str | None = _field(
        _OPT_STR, "the run's ranker (missing: bm25-lite, the only one before the field)", required=False
    )
    run_id: str | None = _field(
        _OPT_STR, "digest of what the run was asked (data, prompts, the settings that decide records)", required=False
    )
    granularity: str | None = _field(_GRANULARITY, "what one memory unit is", required=False)
    question: str | None = _field(_OPT_STR, "question text (for the report's cases)", required=False)
    reference: str | None = _field(_OPT_STR, "reference answer (for the report's cases)", required=False)
    gold_tokens: int | None = _field(_OPT_INT, "tokens of G_q", required=False)
    gold_evicted_units: tuple[int, ...] | None = _field(
        _INT_LIST, "positions of the evicted gold units", required=False
    )
    gold_evicted_where: tuple[str, ...] | None = _field(
        _STR_LIST, "the same units as 'session S, turn T (date, role)'", required=False
    )
    gold_positions: tuple[int, ...] | None = _field(
        _INT_LIST, "positions of the gold units G_q in the history (their ids), ascending", required=False
    )
    gold_evicted_after: tuple[int | None, ...] | None = _field(
        _OPT_INT_LIST,
        "per gold unit (as gold_positions), the position of the unit whose arrival evicted it (a memory "
        "system's: after which no held memory cited it, its own if none ever did); null where kept, or where a "
        "memory system lost it when the history ended",
        required=False,
    )
    gold_ranks: tuple[int | None, ...] | None = _field(
        _OPT_INT_LIST,
        "per gold unit (as gold_positions), its rank (1 = first) under the ranker over the store (held through "
        "memories citing it: the best of their ranks); null where evicted or not ranked (no match)",
        required=False,
    )
    error: str | None = _field(_OPT_STR, "the failed call's message (the reason is in excluded)", required=False)
    store_tokens: int | None = _field(_OPT_INT, "size of the store S_P in tokens", required=False)
    store_units: int | None = _field(_OPT_INT, "size of the store S_P in units", required=False)
    ablations: Ablations | None = _object(
        Ablations, "null: the ablations did not run on this record (see audit.ablations)", required=False
    )
    top_k: int | None = _field(
        _OPT_INT,
        "regime (b): the ranker's read-time k, beside gold_ranks for recall@k and NDCG@k (null: regime a, or no "
        "store)",
        required=False,
    )
    importance_scores: tuple[int, ...] | None = _field(
        _SCORE_COUNTS,
        "units of the question's history scored 1, 2, ..., 10 by the importance scorer (null: the policy reads none)",
        required=False,
    )
    score_ties: tuple[int, int] | None = _field(
        _TIE_COUNTS,
        "a policy deciding by its own per-unit score (memory.eviction.ScoredPolicy, importance scores aside): "
        "[units of the question's history, of them those holding the history's two most common scores] "
        "(null: the policy exposes no scores)",
        required=False,
    )
    memory_tokens: tuple[float, float] | None = _field(
        _TOKEN_SHARE,
        "this question's share of the tokens [in, out] the memory policy's own model calls spent building its "
        "store (the importance scorer's, a memory system's writer's): each call split over the audited questions "
        "whose history it served (null: the policy makes no model call)",
        required=False,
    )
    memory_tokens_estimated: bool | None = _field(
        _VERDICT, "true: some of memory_tokens are estimated (a model reported no usage)", required=False
    )
    memories: GoldMemories | None = _object(
        GoldMemories, "the held memories citing gold (null: a store of raw units)", required=False
    )
    writer: str | None = _field(
        _OPT_STR,
        "the model a memory system wrote its memories with (--restore-writer-model, else the reader; null: the "
        "policy writes with no model of the run's)",
        required=False,
    )

    # -- the counting rule --------------------------------------------------------

    @property
    def enters_n(self) -> bool:
        """Whether the record enters its cell's ``N``: not excluded and oracle-answerable."""
        return enters_n(self)

    @property
    def cell(self) -> CellKey:
        """The record's grid cell."""
        return CellKey.of(self)

    @property
    def key(self) -> tuple[str | int, ...]:
        """The :data:`KEY_FIELDS` and the ranker: unique within one run (a run of several rankers has a record per ranker)."""
        return (self.question_id, self.policy, self.budget, self.seed, self.regime, self.reader, ranker_of(self))

    # -- JSON ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of every field, the typed objects as nested objects (tuples as lists)."""
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        """Validate a JSON object of the current schema and build the record; a problem raises :class:`RecordError`.

        The message names the question and the field (the caller prefixes the
        file and line).
        """
        problem = check(data)
        if problem is not None:
            name, what = problem
            raise RecordError(f"question {data.get('question_id', '?')!r}: field {name!r}: {what}")
        return _from_json(cls, data)

    @classmethod
    def of(cls, record: Record | Mapping[str, Any]) -> Record:
        """``record`` itself when it is a :class:`Record`, else validated from its JSON object."""
        return record if isinstance(record, Record) else cls.from_json(record)


#: The typed objects a record is made of (:func:`_to_json`, :func:`_from_json`).
_Object = TypeVar("_Object", "Record", "Conditions", "Condition", "Ablations")


#: Values a record field holds as they are in JSON (checked by type first: most fields hold one).
_PLAIN = frozenset({str, int, float, bool, type(None)})


#: Each typed object's fields as (name, the typed object it holds or ``None``), by class (:func:`_layout`).
_LAYOUTS: dict[type, tuple[tuple[str, Any], ...]] = {}


def _layout(cls: type) -> tuple[tuple[str, Any], ...]:
    """``cls``'s fields as (name, the typed object it holds or ``None``), read once per class.

    A record is written and read field by field; ``dataclasses.fields`` builds its
    tuple anew at each call (338k calls for the 22,560 records of a 500-question grid).
    """
    layout = _LAYOUTS.get(cls)
    if layout is None:
        layout = _LAYOUTS[cls] = tuple((f.name, f.metadata.get("object")) for f in fields(cls))
    return layout


def _to_json(obj: Record | Conditions | Condition | Ablations) -> dict[str, Any]:
    """``obj`` as a JSON object: its typed objects nested, tuples as lists."""
    out: dict[str, Any] = {}
    for name, nested in _layout(type(obj)):
        value = getattr(obj, name)
        if type(value) in _PLAIN:
            pass
        elif value is not None and nested is not None:
            value = _to_json(value)
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[name] = value
    return out


def _from_json(cls: type[_Object], data: Mapping[str, Any]) -> _Object:
    """Build ``cls`` from a checked JSON object (lists as tuples, nested objects typed)."""
    values: dict[str, Any] = {}
    for name, nested in _layout(cls):
        value = data.get(name)
        if type(value) in _PLAIN:
            pass
        elif value is not None and nested is not None:
            value = _from_json(nested, value)
        elif isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, dict):
            value = dict(value)
        values[name] = value
    return cls(**values)


def _declared(cls: type, prefix: str = "") -> Iterable[tuple[str, Field[Any]]]:
    """Every field of ``cls`` and of the typed objects it holds, by dotted path."""
    for f in fields(cls):
        path = prefix + f.name
        yield path, f
        if "object" in f.metadata:
            yield from _declared(f.metadata["object"], path + ".")


#: Every declared field, by dotted path (``conditions.policy.correct``): (path, check, what it wants).
#: An object field's check is ``None``: its own fields are checked.
FIELDS: tuple[tuple[str, Callable[[Any], bool] | None, str], ...] = tuple(
    (path, f.metadata.get("check"), f.metadata["want"]) for path, f in _declared(Record)
)
#: The fields a saved record must carry, by dotted path (an object's, when the object is there).
REQUIRED_FIELDS: tuple[str, ...] = tuple(path for path, f in _declared(Record) if f.default is MISSING)
#: What each field means, by dotted path (``docs/DESIGN.md`` shows these: :func:`schema_markdown`).
MEANINGS: dict[str, str] = {path: f.metadata["meaning"] for path, f in _declared(Record)}
#: The typed objects of a record, for :func:`schema_markdown`: (class, where a record holds it).
_OBJECTS: tuple[tuple[type, str], ...] = (
    (Record, "one line of `records.jsonl`"),
    (Conditions, "`conditions`"),
    (Condition, "`conditions.oracle`, `conditions.policy`, `conditions.restored`, `memories.forced`"),
    (Ablations, "`ablations`"),
    (GoldMemories, "`memories`"),
)


def enters_n(record: Record) -> bool:
    """The one rule for a cell's ``N``: not excluded and the oracle answered correctly.

    Excluded records (failed model calls) are counted apart, never as errors.
    """
    return record.excluded is None and record.conditions.oracle.correct is True



def bin_of(*, oracle_correct: bool | None, policy_correct: bool | None,
           restored_correct: bool | None, gold_evicted: int | None,
           forced_correct: bool | None = None) -> str | None:
    """The bin of a not-excluded record: only oracle-answerable policy errors are binned.

    Restore fixes it and some gold unit is cited by no held memory (evicted):
    irreversible; restore fixes it, every gold unit is kept, and forcing the
    held memories that cite it (``forced_correct``, regime (a)'s verdict)
    fixes it too: recoverable; restore fixes it, every gold unit is kept, but
    forcing those memories does not: distorted (the trace survived without
    the answer); restore does not fix it: residual. For a store of raw units
    the forced memories are the surviving gold, regime (a)'s context is then
    the restored one, and distorted stays empty.
    """
    if not oracle_correct or policy_correct is not False:
        return None
    if restored_correct:
        if gold_evicted:
            return "irreversible"
        return "distorted" if forced_correct is False else "recoverable"
    return "residual"


def check_schema_version(version: Any, where: str) -> None:
    """Refuse, in one line naming ``where``, records of a schema version this package does not read.

    ``None`` (a file from before versions: version 1) and the :data:`READ_VERSIONS` are read.
    """
    if version is None or (_is_int(version) and version in READ_VERSIONS):
        return
    raise RecordError(
        f"{where}: records of schema version {version!r}; this pytest-restore reads versions "
        f"{', '.join(map(str, READ_VERSIONS))} (and files without a version): use the pytest-restore release that wrote them"
    )


def schema_markdown() -> str:
    """The record schema as markdown: one table per typed object (field, valid value, required, meaning)."""
    out = []
    for cls, where in _OBJECTS:
        out.append(f"`{cls.__name__}` ({where}):\n\n| field | value | required | meaning |\n|---|---|---|---|\n")
        for f in fields(cls):
            required = "yes" if f.default is MISSING else ""
            out.append(f"| `{f.name}` | {f.metadata['want']} | {required} | {f.metadata['meaning']} |\n")
        out.append("\n")
    return "".join(out).rstrip("\n") + "\n"


#: Each typed object's fields by name, by class (:func:`_fields_by_name`).
_FIELDS_BY_NAME: dict[type, dict[str, Field[Any]]] = {}


def _fields_by_name(cls: type) -> dict[str, Field[Any]]:
    """``cls``'s fields by name, read once per class (a record is checked field by field)."""
    found = _FIELDS_BY_NAME.get(cls)
    if found is None:
        found = _FIELDS_BY_NAME[cls] = {f.name: f for f in fields(cls)}
    return found


def _check_object(cls: type, data: Any, prefix: str) -> tuple[str, str] | None:
    """The first field of the JSON object ``data`` (of class ``cls``, at ``prefix``) that is missing, unknown or wrong."""
    declared = _fields_by_name(cls)
    for name, f in declared.items():
        if f.default is MISSING and name not in data:
            return prefix + name, "missing"
    for name, value in data.items():
        if name not in declared:
            return prefix + name, "not a record field"
        meta, optional = declared[name].metadata, declared[name].default is not MISSING
        nested = meta.get("object")
        if nested is not None and isinstance(value, dict):
            problem = _check_object(nested, value, f"{prefix}{name}.")
            if problem is not None:
                return problem
        elif (not optional or value is not None) if nested is not None else not meta["check"](value):
            return prefix + name, f"must be {meta['want']}, got {json.dumps(value, default=str)}"
    return None


def check(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first field of the JSON object ``record`` that is missing, unknown or wrong, and what is wrong with it.

    Fields are named by dotted path (``conditions.policy.correct``). Required
    fields must be present; every other known field is checked when present.
    Then the fields must agree with the counting rule: a record in ``N`` has a
    verdict, and only an oracle-answerable policy error has a bin.
    """
    problem = _check_object(Record, record, "")
    if problem is not None:
        return problem
    verdicts = {name: record["conditions"][name]["correct"] for name in CONDITIONS}
    counted = record["excluded"] is None and verdicts["oracle"] is True
    if counted and verdicts["policy"] is None:
        return "conditions.policy.correct", "null on an oracle-answerable record that is not excluded"
    if record["bin"] is not None and not (counted and verdicts["policy"] is False):
        return "bin", f"{record['bin']!r} on a record that is not an oracle-answerable policy error"
    memories = record.get("memories")
    if record["bin"] == "distorted" and not (memories and memories["forced"]["correct"] is False):
        return "bin", "'distorted' on a record whose forced memories were not read wrong (memories.forced.correct)"
    return None
