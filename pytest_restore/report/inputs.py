"""What a report is made from: the records in canonical order, the run's settings, the statistics pass.

Also reading saved records back (``python -m pytest_restore report``) and
checking that they belong to the run ``summary.json`` describes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_restore import record as record_module
from pytest_restore.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from pytest_restore.record import Record, RecordError, ranker_of
from pytest_restore.stats.analysis import Analysis, analyse
from pytest_restore.stats.families import FAMILIES, Family
from pytest_restore.stats.results import (
    DEFAULT_CALIPER,
    DEFAULT_EQUIVALENCE_MARGIN,
    policy_order,
)

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

    def to_json(self) -> dict[str, Any]:
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


@dataclass(frozen=True)
class RunInfo:
    """What a report says about the run besides its records."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    dataset: Mapping[str, Any] = field(default_factory=dict)
    exclusions: Mapping[str, int] = field(default_factory=dict)
    #: the run's checks outside the grid (grid coverage, real model calls, calibration gate,
    #: judge audit): ``{name: {"result": figures}}``, plain values; report/checks.py renders them
    checks: Mapping[str, Any] = field(default_factory=dict)
    #: the hypothesis families the statistics pass runs (the session's registry; not
    #: written to ``summary.json``: the report CLI takes the built-ins and entry points)
    families: tuple[Family, ...] = FAMILIES
    #: the session that wrote the report (``summary.json``'s ``provenance``; ``None``: not written)
    provenance: Provenance | None = None

    def to_json(self) -> dict[str, Any]:
        """The run section of ``summary.json``."""
        out = {
            "settings": dict(self.settings),
            "dataset": dict(self.dataset),
            "exclusions": dict(sorted(self.exclusions.items())),
        }
        if self.checks:
            out["checks"] = dict(sorted(self.checks.items()))
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunInfo:
        """Read the run section back."""
        return cls(
            data.get("settings", {}), data.get("dataset", {}), data.get("exclusions", {}), data.get("checks", {})
        )


def record_order(r: Record) -> tuple[tuple[int, str], int, str, int, str, str]:
    """The canonical order of records: by cell, then seed, regime and question."""
    return (policy_order(r.policy), -r.budget, r.reader, r.seed, r.regime, r.question_id)


def sort_records(records: Iterable[Record]) -> list[Record]:
    """Records in canonical order (arrival order across workers is not fixed)."""
    return sorted(records, key=record_order)


def analyse_records(records: Sequence[Record], info: RunInfo | None = None) -> Analysis:
    """The statistics pass with the run's bootstrap settings (defaults where unset).

    ``info.settings`` may carry ``bootstrap`` (resamples), ``bootstrap_seed``,
    ``equivalence_margin`` and ``caliper``; missing keys take the paper's values.
    The hypothesis families are ``info.families`` (the built-ins without ``info``).
    """
    settings = info.settings if info is not None else {}
    return analyse(
        records,
        resamples=int(settings.get("bootstrap", DEFAULT_RESAMPLES)),
        seed=int(settings.get("bootstrap_seed", DEFAULT_SEED)),
        equivalence_margin=float(
            settings.get("equivalence_margin", DEFAULT_EQUIVALENCE_MARGIN)
        ),
        caliper=float(settings.get("caliper", DEFAULT_CALIPER)),
        families=info.families if info is not None else FAMILIES,
    )


def fmt(value: float | None, digits: int = 4) -> str:
    """A figure to ``digits`` decimals; "" when undefined."""
    return "" if value is None else f"{value:.{digits}f}"


def short(value: float) -> str:
    """``0.61 -> ".61"`` (the paper's interval style); 1.00 stays ``1.00``."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def dataset_label(info: RunInfo) -> str:
    """The dataset in a few words: its name and how many questions were audited."""
    name = str(info.settings.get("data") or "")
    if not name or name == "embedded synthetic":
        name = "embedded synthetic LongMemEval-S" if name else ""
    audited = info.dataset.get("audited")
    return ", ".join(x for x in (name, f"{audited} questions" if audited else "") if x)


def rankers_of(records: Iterable[Record]) -> list[str]:
    """The rankers the records were read with (records older than the field used BM25-lite)."""
    return sorted({ranker_of(r) for r in records})


def read_records(path: str | Path) -> list[Record]:
    """Read and validate ``records.jsonl`` (see :func:`pytest_restore.record.read_records`).

    Records of several rankers (a run of ``--restore-rankers``) are compared in one report.
    The records are read at the schema version their ``summary.json`` (beside
    them) names, version 1 migrated as read; a version this package does not
    read is refused before a record is read
    (:func:`pytest_restore.record.check_schema_version`). Without a summary,
    or one written before versions, each record's shape says its version.
    """
    summary = Path(path).with_name("summary.json")
    version = None
    if summary.exists():
        try:
            data = json.loads(summary.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RecordsError(f"{summary}: cannot read: {exc}") from None
        if isinstance(data, dict):
            version = data.get("record_schema")
            record_module.check_schema_version(version, str(summary))
    return record_module.read_records(path, version)


def read_run_info(records_path: str | Path) -> RunInfo:
    """The run section and provenance of the ``summary.json`` beside ``records_path``; empty when absent.

    A report rebuilt from them is the session's, byte for byte (its provenance and partial mark included).
    """
    summary = Path(records_path).with_name("summary.json")
    if not summary.exists():
        return RunInfo()
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RecordsError(f"{summary}: cannot read the run section: {exc}") from None
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(run, dict):
        raise RecordsError(f"{summary}: no 'run' object")
    provenance = data.get("provenance")
    if provenance is not None and not isinstance(provenance, dict):
        raise RecordsError(f"{summary}: 'provenance' is not an object")
    return replace(RunInfo.from_json(run), provenance=Provenance.from_json(provenance) if provenance else None)


def check_run_info(records: Sequence[Record], info: RunInfo, records_path: str | Path) -> None:
    """The records must be of the run ``summary.json`` describes: same run id, granularity and ranker.

    Fields absent on either side (older files) are not compared. The first
    conflict is a one-line :class:`RecordsError`.
    """
    first = records[0]
    summary = Path(records_path).with_name("summary.json")
    for name, ours in (("run_id", first.run_id), ("granularity", first.granularity), ("ranker", first.ranker)):
        theirs = info.settings.get(name)
        if name == "ranker" and info.settings.get("rankers"):
            theirs = ours if ours in info.settings["rankers"] else ", ".join(info.settings["rankers"])
        if ours is not None and theirs is not None and ours != theirs:
            raise RecordsError(
                f"{records_path}: line 1: question {first.question_id!r}: field {name!r}: "
                f"{ours!r} but {summary} says {theirs!r} (records of another run)"
            )
