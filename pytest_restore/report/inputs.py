"""What a report is made from: the records in canonical order, the run's settings, the statistics pass.

Also reading saved records back (``python -m pytest_restore report``) and
checking that they belong to the run ``summary.json`` describes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TypedDict

from pytest_restore import record as record_module
from pytest_restore import records_file
from pytest_restore.audit.memo import ReaderCalls, UsageJSON
from pytest_restore.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from pytest_restore.record import Record, RecordError, ranker_of
from pytest_restore.settings import AuditSettings, setting_names
from pytest_restore.stats.analysis import Analysis, analyse
from pytest_restore.stats.cost import CostFigures
from pytest_restore.stats.families import FAMILIES, Family
from pytest_restore.stats.results import (
    DEFAULT_CALIPER,
    DEFAULT_EQUIVALENCE_MARGIN,
    FamilySummary,
    Totals,
    policy_order,
)
from pytest_restore.stats.ties import ScoreDistribution, ScoreTies

#: Saved records that cannot be turned into a report (the name this module always used).
RecordsError = RecordError


@dataclass(frozen=True)
class Provenance:
    """Which session wrote a report: the package, when it started, its id, and whether it finished its grid.

    ``session_id`` names the session; the records' ``run_id`` is a digest of
    the settings that shape them, the same for every rerun. ``partial`` says
    why the session did not finish its grid (``None``: it did); a partial
    report's ``report.md`` opens with the mark.
    """

    version: str
    started_utc: str
    session_id: str
    partial: str | None = None
    package: str = "pytest-restore"

    def to_json(self) -> ProvenanceJSON:
        """``summary.json``'s ``provenance`` object."""
        return {
            "package": self.package,
            "version": self.version,
            "started_utc": self.started_utc,
            "session_id": self.session_id,
            "partial": self.partial,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Provenance:
        """Read ``summary.json``'s ``provenance`` back."""
        return cls(
            version=str(data.get("version", "")),
            started_utc=str(data.get("started_utc", "")),
            session_id=str(data.get("session_id", "")),
            partial=None if data.get("partial") is None else str(data["partial"]),
            package=str(data.get("package", "pytest-restore")),
        )


#: What a report adds to the declared settings: the records' run id (a digest of what shapes them), real
#: models' use (summed over processes, by role and name), each reader's, the judge's and (when a policy
#: called it) the scorer's and the writer's price (USD per million tokens [in, out]; null: unknown, fakes are free), and the
#: H2 matching's caliper (no option sets it: the paper's value unless a file names one).
REPORT_SETTINGS = ("run_id", "model_usage", "model_prices", "caliper")


def settings_keys() -> frozenset[str]:
    """Every key ``run.settings`` may hold: the declared settings' and the report's own."""
    return frozenset((*setting_names(), *REPORT_SETTINGS))


@dataclass(frozen=True)
class RunSettings:
    """``summary.json``'s ``run.settings``, typed: what ran and the report's own figures.

    The declared settings are :class:`~pytest_restore.settings.AuditSettings`
    as the run shows them (``data`` as the file's name, ``policies`` and
    ``budgets`` those that ran); the report adds :data:`REPORT_SETTINGS`.
    ``keys`` are the keys the file holds (an older file holds fewer, a run
    whose writer is each reader leaves ``writer`` out): the settings table shows
    those, and :meth:`to_json` writes them back as they were. A key this
    version does not declare is kept in ``extra``, shown and written as read.
    """

    audit: AuditSettings
    keys: tuple[str, ...]
    #: the records' run id (a digest of what shapes them; ``None``: a run without records)
    run_id: str | None = None
    #: real models' use summed over processes, by role and name (``None``: not in the file)
    model_usage: Mapping[str, UsageJSON] | None = None
    #: each reader's, the judge's (the scorer's, the writer's) price in USD per million tokens [in, out]
    model_prices: Mapping[str, tuple[float, float] | None] | None = None
    #: the H2 matching's caliper, when a file names one (the paper's value otherwise)
    caliper: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``run.settings`` object: every key in :attr:`keys`, as plain JSON values."""
        declared = self.audit.to_json()
        report: dict[str, Any] = {
            "run_id": self.run_id,
            "model_usage": None if self.model_usage is None else dict(self.model_usage),
            "model_prices": None if self.model_prices is None else {
                spec: None if price is None else list(price) for spec, price in self.model_prices.items()
            },
            "caliper": self.caliper,
        }
        return {key: declared[key] if key in declared else report[key] if key in report else self.extra[key] for key in self.keys}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSettings:
        """Read ``run.settings`` back; a declared setting without a default that the file lacks is a
        ``KeyError`` naming it."""
        prices = data.get("model_prices")
        usage = data.get("model_usage")
        known = settings_keys()
        return cls(
            audit=AuditSettings.from_json(data),
            keys=tuple(data),
            run_id=None if data.get("run_id") is None else str(data["run_id"]),
            model_usage=None if usage is None else {str(name): usage_json(u) for name, u in usage.items()},
            model_prices=None if prices is None else {
                str(spec): None if price is None else (price[0], price[1]) for spec, price in prices.items()
            },
            caliper=None if data.get("caliper") is None else float(data["caliper"]),
            extra={key: value for key, value in data.items() if key not in known},
        )

    @property
    def data_label(self) -> str:
        """The data's name as the report says it (empty: none named)."""
        name = self.audit.data or ""
        return "embedded synthetic LongMemEval-S" if name == "embedded synthetic" else name


def usage_json(data: Mapping[str, Any]) -> UsageJSON:
    """One model's usage (``Usage.to_json``) read back."""
    return {
        "sent": int(data["sent"]), "cached": int(data["cached"]), "failed": int(data["failed"]),
        "input_tokens": int(data["input_tokens"]), "output_tokens": int(data["output_tokens"]),
        "served": [str(url) for url in data.get("served", [])],
    }


class DataDescription(TypedDict, total=False):
    """``summary.json``'s ``run.dataset``: the data a run read, as the process that loaded it describes it."""

    sha256: str
    #: whether the file is the official LongMemEval-S (its sha256)
    official: bool
    #: the loader that read it
    dataset: str
    #: questions in the file (those left out by the loader included) / audited
    questions: int
    audited: int
    #: flawed evidence references handled by the loader's rule, by kind
    repairs: dict[str, int]
    #: ``--restore-errata``: the corrections applied, counted by type
    errata: dict[str, Any]
    #: histories audited (questions sharing one are evicted once)
    histories: int
    #: per budget (as text), the share of histories it binds for
    budget_binding: dict[str, float]


def data_description(data: Mapping[str, Any], out: DataDescription | None = None) -> DataDescription:
    """``run.dataset`` (or a grid item's description of the data) read back, each field typed, into ``out``
    (a new one when ``None``); a key this version does not know is left out."""
    out = DataDescription() if out is None else out
    if "sha256" in data:
        out["sha256"] = str(data["sha256"])
    if "official" in data:
        out["official"] = bool(data["official"])
    if "dataset" in data:
        out["dataset"] = str(data["dataset"])
    if "questions" in data:
        out["questions"] = int(data["questions"])
    if "audited" in data:
        out["audited"] = int(data["audited"])
    if "repairs" in data:
        out["repairs"] = {str(kind): int(n) for kind, n in data["repairs"].items()}
    if "errata" in data:
        out["errata"] = dict(data["errata"])
    if "histories" in data:
        out["histories"] = int(data["histories"])
    if "budget_binding" in data:
        out["budget_binding"] = {str(budget): share for budget, share in data["budget_binding"].items()}
    return out


class RunSection(TypedDict, total=False):
    """``summary.json``'s ``run``: the settings, the data, the questions left out and the checks outside the grid."""

    settings: dict[str, Any]
    dataset: DataDescription
    exclusions: dict[str, int]
    #: ``{name: {"result": figures}}``, each read back by its check (``run/checks.py``)
    checks: dict[str, dict[str, Any]]


class ProvenanceJSON(TypedDict):
    """``summary.json``'s ``provenance``: which session wrote the report."""

    package: str
    version: str
    started_utc: str
    session_id: str
    partial: str | None


class RunLogJSON(TypedDict, total=False):
    """``summary.json`` as a file: :meth:`RunLog.to_json`, and what :func:`read_run_log` checks of a saved one."""

    #: the records' schema version (``record.SCHEMA_VERSION``): a file of another version is refused in one line
    record_schema: int
    run: RunSection
    provenance: ProvenanceJSON
    #: records, cells, questions, excluded records, bins (``stats.results.Totals``)
    counts: dict[str, Any]
    record_exclusions: dict[str, int]
    #: per reader, its calls unique against naive (``audit.memo.ReaderCalls``)
    model_calls: dict[str, dict[str, Any]]
    simulated: bool
    simulated_note: str
    #: per family and reader, its tests in counts (``stats.results.FamilySummary``)
    hypotheses: list[dict[str, Any]]
    failures: list[str]
    not_testable: list[str]
    #: what each answer cost, per condition and regime-(b) cell (``stats.cost.CostFigures.to_json``)
    cost: dict[str, Any]
    #: each importance policy's score counts and whether its decisions are mostly ties (``stats.ties``)
    importance_scores: list[dict[str, Any]]
    #: each other policy deciding by its own per-unit score: its ties and whether its decisions are mostly ties (``stats.ties``)
    score_ties: list[dict[str, Any]]


class CheckResult(Protocol):
    """One check outside the grid as a report reads it: its typed result, its JSON form, its section.

    The checks themselves (when they run, over what) are the run core's
    (``run/checks.py``, one class each, in a registry); the report renders
    their sections in the order of ``section``, and ``summary.json`` keeps
    ``{name: {"result": to_json()}}``.
    """

    @property
    def name(self) -> str:
        """The key ``summary.json``'s ``run.checks`` files it under."""
        ...

    @property
    def section(self) -> int:
        """Its place among the report's check sections (lower first)."""
        ...

    def to_json(self) -> Any:
        """The result's figures as plain JSON values."""
        ...

    def render_md(self) -> str:
        """The check's section of ``report.md``."""
        ...


@dataclass(frozen=True)
class RawCheck:
    """A check ``summary.json`` names but no registered check reads: its entry kept, its figures shown as JSON."""

    name: str
    entry: Mapping[str, Any]
    #: after every known check's section
    section: int = 1_000

    def to_json(self) -> Any:
        """The figures as they were."""
        return self.entry.get("result")

    def render_md(self) -> str:
        """Its figures as a JSON block under the check's name."""
        return f"## Check: {self.name}\n\n```json\n{json.dumps(self.to_json(), indent=2, sort_keys=True)}\n```\n"


#: How a ``summary.json`` check entry is read back: name and entry -> its typed result.
ReadCheck = Callable[[str, Mapping[str, Any]], CheckResult]


def read_raw_check(name: str, entry: Mapping[str, Any]) -> CheckResult:
    """Any check, read as :class:`RawCheck` (without the run core's registry)."""
    return RawCheck(name, entry)


@dataclass(frozen=True)
class RunInfo:
    """What a report says about the run besides its records."""

    #: what ran (``None``: records without a ``summary.json``)
    settings: RunSettings | None = None
    dataset: DataDescription = field(default_factory=lambda: DataDescription())
    #: questions left out before the audit, by reason
    exclusions: Mapping[str, int] = field(default_factory=dict)
    #: the run's checks outside the grid (grid coverage, real model calls, calibration gate, judge
    #: audit, batch rounds, embeddings) by name, each its typed result (``run/checks.py``)
    checks: Mapping[str, CheckResult] = field(default_factory=dict)
    #: the hypothesis families the statistics pass runs (the session's registry; not
    #: written to ``summary.json``: the report CLI takes the built-ins and entry points)
    families: tuple[Family, ...] = FAMILIES
    #: the session that wrote the report (``summary.json``'s ``provenance``; ``None``: not written)
    provenance: Provenance | None = None

    def to_json(self) -> RunSection:
        """The run section of ``summary.json``."""
        out = RunSection(
            settings=self.settings.to_json() if self.settings is not None else {},
            dataset=self.dataset, exclusions=dict(sorted(self.exclusions.items())),
        )
        if self.checks:
            out["checks"] = {name: {"result": check.to_json()} for name, check in sorted(self.checks.items())}
        return out

    @property
    def idle_budgets(self) -> frozenset[int]:
        """The budgets that bind for no history of the run: their cells evict nothing, whatever the policy.

        A contrast between two policies at such a budget compares one store with
        itself, so no number of questions would test it (the findings say so).
        """
        binding = self.dataset.get("budget_binding") or {}
        return frozenset(int(budget) for budget, share in binding.items() if share == 0)

    def check_sections(self) -> list[str]:
        """The checks' sections of ``report.md``, in their declared order."""
        return [check.render_md() for check in sorted(self.checks.values(), key=lambda c: (c.section, c.name))]

    @classmethod
    def from_json(cls, data: Mapping[str, Any], read_check: ReadCheck = read_raw_check) -> RunInfo:
        """Read the run section back; ``read_check`` reads each check (the run core's registry, ``run/checks.py``).

        An older file's pre-rendered ``"markdown"`` entry of a check is not read (nor kept).
        """
        checks = {str(name): _read_check(read_check, str(name), entry) for name, entry in dict(data.get("checks", {})).items()}
        settings, dataset, exclusions = (data.get(key, {}) for key in ("settings", "dataset", "exclusions"))
        if not all(isinstance(part, dict) for part in (settings, dataset, exclusions)):
            raise RecordsError("the run section's settings, dataset and exclusions are not all objects")
        try:
            typed = RunSettings.from_json(settings) if settings else None
        except KeyError as err:
            raise RecordsError(f"run.settings: no field {err} where a run's settings hold one") from None
        return cls(typed, data_description(dataset), {str(k): int(n) for k, n in exclusions.items()}, checks)


def _read_check(read_check: ReadCheck, name: str, entry: Any) -> CheckResult:
    """One check entry read back, a malformed one a :class:`RecordsError` naming the check and the field."""
    if not isinstance(entry, Mapping):
        raise RecordsError(f"run.checks.{name} is not an object")
    try:
        return read_check(name, entry)
    except KeyError as err:
        raise RecordsError(f"run.checks.{name}: no field {err} where its result holds one") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise RecordsError(f"run.checks.{name}: a field of the wrong type ({err})") from None


@dataclass(frozen=True)
class RunLog:
    """``summary.json``: the run log without its records, versioned with them (``record_schema``).

    Made once per report from the run's :class:`RunInfo`, its records and the
    analysis (``report.writer.run_log``); ``report.md``, the terminal's lines
    and ``summary.json`` (:meth:`to_json`) read this one object. ``python -m
    pytest_restore report`` reads ``run`` and ``provenance`` back
    (:func:`read_run_info`), so a rebuilt report is the session's, byte for byte.
    """

    #: the run section, and the session's provenance
    run: RunInfo
    #: the records in totals
    counts: Totals
    #: excluded records by reason, reasons sorted
    record_exclusions: Mapping[str, int]
    #: per reader, its main conditions' calls unique against naive
    model_calls: Mapping[str, ReaderCalls]
    #: per family and reader, its tests in counts
    hypotheses: tuple[FamilySummary, ...]
    #: one line per expectation the run could test and did not meet (each fails the session)
    failures: tuple[str, ...]
    #: one line per family whose unmet expectations this run had no power to meet
    not_testable: tuple[str, ...]
    #: what the report opens with when a model was simulated (``None``: none was)
    simulated_note: str | None = None
    #: what each answer cost (``None``: no record carries tokens)
    cost: CostFigures | None = None
    #: each importance policy's score distribution
    importance_scores: tuple[ScoreDistribution, ...] = ()
    #: each other policy deciding by its own per-unit score: how many units share their history's two top scores
    score_ties: tuple[ScoreTies, ...] = ()
    record_schema: int = record_module.SCHEMA_VERSION

    @property
    def simulated(self) -> bool:
        """Whether a fake model took part."""
        return self.simulated_note is not None

    def to_json(self) -> RunLogJSON:
        """``summary.json``'s object."""
        out = RunLogJSON(
            record_schema=self.record_schema,
            run=self.run.to_json(),
            counts=self.counts.to_json(),
            record_exclusions=dict(self.record_exclusions),
            model_calls={reader: calls.to_json() for reader, calls in self.model_calls.items()},
            simulated=self.simulated,
            hypotheses=[row.to_json() for row in self.hypotheses],
            failures=list(self.failures),
            not_testable=list(self.not_testable),
        )
        if self.simulated_note:
            out["simulated_note"] = self.simulated_note
        if self.run.provenance is not None:
            out["provenance"] = self.run.provenance.to_json()
        if self.cost is not None:
            out["cost"] = self.cost.to_json()
        if self.importance_scores:
            out["importance_scores"] = [d.to_json() for d in self.importance_scores]
        if self.score_ties:
            out["score_ties"] = [t.to_json() for t in self.score_ties]
        return out


def record_order(r: Record) -> tuple[tuple[int, str], int, str, int, str, str]:
    """The canonical order of records: by cell, then seed, regime and question."""
    return (policy_order(r.policy), -r.budget, r.reader, r.seed, r.regime, r.question_id)


def sort_records(records: Iterable[Record]) -> list[Record]:
    """Records in canonical order (arrival order across workers is not fixed)."""
    return sorted(records, key=record_order)


def analyse_records(records: Sequence[Record], info: RunInfo | None = None) -> Analysis:
    """The statistics pass with the run's bootstrap settings (defaults where unset).

    ``info.settings`` gives ``bootstrap`` (resamples), ``bootstrap_seed``,
    ``equivalence_margin`` and ``caliper``; without settings (or a caliper) the paper's values.
    The hypothesis families are ``info.families`` (the built-ins without ``info``).
    """
    settings = info.settings if info is not None else None
    audit = settings.audit if settings is not None else None
    caliper = settings.caliper if settings is not None else None
    return analyse(
        records,
        resamples=audit.bootstrap if audit is not None else DEFAULT_RESAMPLES,
        seed=audit.bootstrap_seed if audit is not None else DEFAULT_SEED,
        equivalence_margin=audit.equivalence_margin if audit is not None else DEFAULT_EQUIVALENCE_MARGIN,
        caliper=caliper if caliper is not None else DEFAULT_CALIPER,
        families=info.families if info is not None else FAMILIES,
    )


def fmt(value: float | None, digits: int = 4) -> str:
    """A figure to ``digits`` decimals; "" when undefined."""
    return "" if value is None else f"{value:.{digits}f}"


def num(value: float | None, digits: int = 3, missing: str = "-") -> str:
    """A figure of a table to ``digits`` decimals; ``missing`` when undefined (report.md, compare.md)."""
    return missing if value is None else f"{value:.{digits}f}"


def interval(lo: float | None, hi: float | None, digits: int = 3, *, signed: bool = False) -> str:
    """An interval as ``[lo, hi]`` to ``digits`` decimals, each bound with its sign when ``signed`` (a
    difference's); ``-`` when undefined."""
    if lo is None or hi is None:
        return "-"
    sign = "+" if signed else ""
    return f"[{lo:{sign}.{digits}f}, {hi:{sign}.{digits}f}]"


def short(value: float) -> str:
    """``0.61 -> ".61"`` (the paper's interval style); 1.00 stays ``1.00``."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


#: What markdown (and report.html's reading of it) would take as syntax in a name: a table's
#: column bar, emphasis, code, links and HTML.
_MARKDOWN_SYNTAX = re.compile(r"([\\`*_\[\]<>|])")


def md_text(name: str) -> str:
    """A name a user chose (a policy, reader, ranker, system) as markdown that shows it as written.

    Every character markdown reads as syntax is backslash-escaped: ``a|b`` stays one table cell,
    ``*x*`` is not emphasis, ``<i>`` is not HTML. The built-in names have none of them, so they
    are written unchanged.
    """
    return _MARKDOWN_SYNTAX.sub(r"\\\1", name)


def dataset_label(info: RunInfo) -> str:
    """The dataset in a few words: its name and how many questions were audited."""
    name = info.settings.data_label if info.settings is not None else ""
    audited = info.dataset.get("audited")
    return ", ".join(x for x in (name, f"{audited} questions" if audited else "") if x)


def rankers_of(records: Iterable[Record]) -> list[str]:
    """The rankers the records were read with (records older than the field used BM25-lite)."""
    return sorted({ranker_of(r) for r in records})


@dataclass(frozen=True)
class SavedRunLog:
    """A saved ``summary.json`` read back, typed: the records' schema version and the run section with the
    session's provenance.

    What else the file holds (counts, families, cost, score ties) is what the
    statistics pass makes from the records; a report rebuilt from them makes it
    again, byte for byte, so it is not read back.
    """

    path: Path
    #: the records' schema version (``None``: a file written before versions)
    record_schema: int | None
    run: RunInfo


def read_run_log(records_path: str | Path, read_check: ReadCheck = read_raw_check) -> SavedRunLog | None:
    """The ``summary.json`` beside ``records_path`` (``None``: there is none), its version checked and its run
    section read typed (``read_check`` reads each check outside the grid); a problem is one
    :class:`RecordsError` line naming the file."""
    summary = Path(records_path).with_name("summary.json")
    if not summary.exists():
        return None
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RecordsError(f"{summary}: cannot read: {exc}") from None
    if not isinstance(data, dict):
        raise RecordsError(f"{summary}: not a JSON object")
    schema = data.get("record_schema")
    record_module.check_schema_version(schema, str(summary))
    run = data.get("run")
    if run is not None and not isinstance(run, dict):
        raise RecordsError(f"{summary}: 'run' is not an object")
    provenance = data.get("provenance")
    if provenance is not None and not isinstance(provenance, dict):
        raise RecordsError(f"{summary}: 'provenance' is not an object")
    if run is None:
        raise RecordsError(f"{summary}: no 'run' object")
    try:
        info = RunInfo.from_json(run, read_check)
    except RecordsError as err:
        raise RecordsError(f"{summary}: {err}") from None
    info = replace(info, provenance=Provenance.from_json(provenance) if provenance else None)
    return SavedRunLog(summary, None if schema is None else int(schema), info)


def read_records(path: str | Path) -> list[Record]:
    """Read and validate ``records.jsonl`` (see :func:`pytest_restore.records_file.read_records`).

    Records of several rankers (a run of ``--restore-rankers``) are compared in one report.
    The records are read at the schema version their ``summary.json`` (beside
    them) names, version 1 migrated as read; a version this package does not
    read is refused before a record is read (:func:`read_run_log`). Without a
    summary, or one written before versions, each record's shape says its version.
    """
    log = read_run_log(path)
    return records_file.read_records(path, log.record_schema if log is not None else None)


def read_run_info(records_path: str | Path, read_check: ReadCheck = read_raw_check) -> RunInfo:
    """The run section and provenance of the ``summary.json`` beside ``records_path``; empty when absent.

    ``read_check`` reads each check outside the grid back into its typed result.
    A report rebuilt from them is the session's, byte for byte (its provenance and partial mark included).
    """
    log = read_run_log(records_path, read_check)
    return RunInfo() if log is None else log.run


def check_run_info(records: Sequence[Record], info: RunInfo, records_path: str | Path) -> None:
    """The records must be of the run ``summary.json`` describes: same run id, granularity and ranker.

    Fields absent on either side (older files) are not compared. The first
    conflict is a one-line :class:`RecordsError`.
    """
    first = records[0]
    summary = Path(records_path).with_name("summary.json")
    settings = info.settings
    if settings is None:
        return
    for name, ours, theirs in (
        ("run_id", first.run_id, settings.run_id),
        ("granularity", first.granularity, settings.audit.granularity),
        ("ranker", first.ranker, settings.audit.ranker),
    ):
        if name == "ranker" and settings.audit.rankers:
            rankers = settings.audit.rankers
            theirs = ours if ours in rankers else ", ".join(rankers)
        if ours is not None and name in settings.keys and theirs is not None and ours != theirs:
            raise RecordsError(
                f"{records_path}: line 1: question {first.question_id!r}: field {name!r}: "
                f"{ours!r} but {summary} says {theirs!r} (records of another run)"
            )
