"""The pytest plugin: options, the audit grid and the session report.

Hooks stay thin. ``pytest_configure`` parses the options into a
:class:`RestoreSettings` and registers a :class:`RestoreSession`, which does
the work: it parametrizes the grid (one item per policy x budget), gives each
item its cell through the ``restore_cell`` fixture, gathers the records every
item attaches to its report (from xdist workers too) and, on the controller
only, writes the report once at the end of the session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import importlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_restore import __version__
from pytest_restore.audit.calibration import calibrate
from pytest_restore.audit.judge_audit import audit_judge
from pytest_restore.audit.run import Audit, AuditConfig, CellRun, construct_checks
from pytest_restore.data.dataset import DataError, Dataset, Question, is_prepared, load_dataset
from pytest_restore.data.dataset import auditable as data_auditable
from pytest_restore.data.units import Granularity
from pytest_restore.memory.eviction import Policy, PolicyRegistry, default_registry
from pytest_restore.memory.kernels import cached_on_disk as kernels_cached_on_disk
from pytest_restore.memory.retrieval import RankerRegistry, default_rankers
from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.fake import FakeReader, FakeScorer
from pytest_restore.models.openai_chat import describe_decoding, estimate_tokens
from pytest_restore.models.prompts import READER_MAX_TOKENS, PromptSet, parse_score
from pytest_restore.models.providers import (
    CostLine,
    ModelOptions,
    ModelSpecError,
    ProviderRegistry,
    cached_text,
    check_spec,
    close_model,
    cost_line,
    default_providers,
    is_real,
    make_model,
    missing_key_problem,
    parse_price,
    render_cost,
)
from pytest_restore.plugin.options import (
    OPTIONS,
    RECORDS_PROPERTY,
    RUN_KEY,
    SESSION_KEY,
    _dest,
    small_data,
)
from pytest_restore.record import Record
from pytest_restore.report.inputs import RunInfo
from pytest_restore.report.writer import ReportFiles, terminal_lines, write_report
from pytest_restore.stats.analysis import cell_verdicts
from pytest_restore.stats.families import FAMILIES, family_of
from pytest_restore.stats.results import HypothesisTest, StatsSettings, budget_label

#: Said when numba has not compiled the kernels yet (measured: ~9 s of a cold build on 2 busy cores).
COMPILING = "compiling the numba kernels (once after an install or upgrade: about 10 s on 2 cores) ..."
META_PROPERTY = "restore_meta"
USAGE_PROPERTY = "restore_usage"

#: Fewer bootstrap resamples than this give intervals too coarse to read.
MIN_RESAMPLES = 100


def _items(where: str, text: str) -> list[str]:
    """The comma-separated items of a list option; an empty item is an error, not skipped."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip():
        raise pytest.UsageError(f"{where}: no values given")
    if any(not part for part in parts):
        raise pytest.UsageError(f"{where}: empty item in {text!r}")
    return parts


def _parse_int(where: str, text: str, *, minimum: int = 0) -> int:
    """One whole number (``80k`` allowed), at least ``minimum``."""
    part = text.strip().lower()
    scale = 1000 if part.endswith("k") else 1
    try:
        value = int(part.removesuffix("k")) * scale
    except ValueError:
        raise pytest.UsageError(f"{where}: {text.strip()!r} is not a whole number") from None
    if value < minimum:
        raise pytest.UsageError(f"{where}: {text.strip()!r} is below the minimum of {minimum}")
    return value


def _parse_ints(where: str, text: str, *, minimum: int = 0) -> tuple[int, ...]:
    """Distinct whole numbers, comma-separated: a repeated value (``80k,80000``) is an error."""
    values: dict[int, str] = {}
    for part in _items(where, text):
        value = _parse_int(where, part, minimum=minimum)
        if value in values:
            raise pytest.UsageError(f"{where}: {part!r} repeats {values[value]!r}")
        values[value] = part
    return tuple(values)


def _parse_number(where: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise pytest.UsageError(f"{where}: {text!r} is not a finite number")
    return value


def _parse_float(where: str, text: str) -> float:
    """A finite number strictly between 0 and 1."""
    value = _parse_number(where, text)
    if not 0 < value < 1:
        raise pytest.UsageError(f"{where}: {value} is not between 0 and 1")
    return value


def _parse_positive(where: str, text: str) -> float:
    """A finite number above 0."""
    value = _parse_number(where, text)
    if value <= 0:
        raise pytest.UsageError(f"{where}: must be positive")
    return value


def _parse_names(where: str, text: str) -> tuple[str, ...] | None:
    """Distinct names, comma-separated (``None`` when the option is unset)."""
    if not text:
        return None
    names = _items(where, text)
    repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if repeated is not None:
        raise pytest.UsageError(f"{where}: {repeated!r} is given twice")
    return tuple(names)


@dataclass(frozen=True)
class RestoreSettings:
    """The parsed options: plain values, the same on the controller and every worker."""

    data: str | None
    report_dir: str
    budgets: tuple[int, ...]
    policies: tuple[str, ...] | None
    seeds: tuple[int, ...]
    granularity: str
    questions: int | None
    subset_seed: int
    reader: str
    judge: str
    scorer: str
    embedded_questions: int
    bootstrap: int
    bootstrap_seed: int
    equivalence_margin: float
    family_checks: str
    base_url: str | None
    cache: str | None
    max_concurrency: int
    rpm: float | None
    tpm: float | None
    max_tries: int
    timeout: float
    prompts: str | None
    robustness_reader: str | None
    audit_judge: str | None
    audit_judge_sample: int
    calibration: str
    dry_run: bool
    ranker: str = "bm25-lite"
    ablations: bool = False
    max_retry_after: float = 60.0
    #: ``(model, input USD, output USD)`` per million tokens, from ``--restore-price``
    prices: tuple[tuple[str, float, float], ...] = ()
    #: whether any model of the grid is a real one (its provider says so); not a setting of the report
    real_models: bool = False

    @property
    def readers(self) -> tuple[str, ...]:
        """The primary reader, then the robustness reader if any."""
        return (self.reader,) + ((self.robustness_reader,) if self.robustness_reader else ())

    @property
    def uses_real_models(self) -> bool:
        """Whether any model of the grid is a real one."""
        return self.real_models

    @classmethod
    def from_config(cls, config: pytest.Config, providers: ProviderRegistry) -> RestoreSettings:
        """Read the options, falling back to the ini keys; every value is checked here, before any work."""
        raw: dict[str, str] = {}
        where: dict[str, str] = {}  # where each value came from, for error messages
        for name, default, _help, _kind in OPTIONS:
            value = config.getoption(_dest(name))
            where[name] = f"--restore-{name}"
            if value is None:
                where[name] = f"ini key {_dest(name)}" + (f" ({config.inipath.name})" if config.inipath else "")
                try:
                    value = config.getini(_dest(name))
                except pytest.UsageError as err:  # pytest's own type check: name the key
                    message = str(err).removeprefix(f"{config.inipath}: ")
                    raise pytest.UsageError(f"{where[name]}: {message}") from None
                if value is None:
                    value, where[name] = default, f"--restore-{name}"
            raw[name] = str(value).strip()
        if raw["family-checks"] not in ("fail", "report"):
            raise pytest.UsageError(f"{where['family-checks']}: {raw['family-checks']!r} is not fail or report")
        if raw["calibration"] not in ("auto", "on", "off"):
            raise pytest.UsageError(f"{where['calibration']}: {raw['calibration']!r} is not auto, on or off")
        for role in ("reader", "judge", "scorer", "robustness-reader", "audit-judge"):
            if raw[role]:
                try:
                    check_spec(raw[role], where[role], providers)
                except ModelSpecError as err:
                    raise pytest.UsageError(str(err)) from None
        if raw["robustness-reader"] and raw["robustness-reader"] == raw["reader"]:
            raise pytest.UsageError(f"{where['robustness-reader']}: must differ from --restore-reader")
        if raw["granularity"] not in ("turn", "session"):
            raise pytest.UsageError(f"{where['granularity']}: {raw['granularity']!r} is not turn or session")
        questions = _parse_int(where["questions"], raw["questions"], minimum=1) if raw["questions"] else None
        budgets = _parse_ints(where["budgets"], raw["budgets"], minimum=1)
        price_texts = config.getoption("restore_price")
        price_where = "--restore-price"
        if price_texts is None:
            price_texts, price_where = config.getini("restore_price"), "ini key restore_price"
        prices = []
        for text in price_texts:
            try:
                model, (in_price, out_price) = parse_price(text, price_where)
            except ModelSpecError as err:
                raise pytest.UsageError(str(err)) from None
            prices.append((model, in_price, out_price))
        return cls(
            prices=tuple(prices),
            data=raw["data"] or None,
            report_dir=raw["report-dir"],
            budgets=tuple(sorted(budgets, reverse=True)),
            policies=_parse_names(where["policies"], raw["policies"]),
            seeds=_parse_ints(where["seeds"], raw["seeds"]),
            granularity=raw["granularity"],
            questions=questions,
            subset_seed=_parse_int(where["subset-seed"], raw["subset-seed"]),
            reader=raw["reader"],
            judge=raw["judge"],
            scorer=raw["scorer"],
            embedded_questions=_parse_int(where["embedded-questions"], raw["embedded-questions"], minimum=1),
            bootstrap=_parse_int(where["bootstrap"], raw["bootstrap"], minimum=MIN_RESAMPLES),
            bootstrap_seed=_parse_int(where["bootstrap-seed"], raw["bootstrap-seed"]),
            equivalence_margin=_parse_float(where["equivalence-margin"], raw["equivalence-margin"]),
            family_checks=raw["family-checks"],
            base_url=raw["base-url"] or os.environ.get("OPENAI_BASE_URL") or None,
            cache=raw["cache"] or None,
            max_concurrency=_parse_int(where["max-concurrency"], raw["max-concurrency"], minimum=1),
            rpm=_parse_positive(where["rpm"], raw["rpm"]) if raw["rpm"] else None,
            tpm=_parse_positive(where["tpm"], raw["tpm"]) if raw["tpm"] else None,
            max_tries=_parse_int(where["max-tries"], raw["max-tries"], minimum=1),
            timeout=_parse_positive(where["timeout"], raw["timeout"]),
            max_retry_after=_parse_positive(where["max-retry-after"], raw["max-retry-after"]),
            prompts=raw["prompts"] or None,
            robustness_reader=raw["robustness-reader"] or None,
            audit_judge=raw["audit-judge"] or None,
            audit_judge_sample=_parse_int(where["audit-judge-sample"], raw["audit-judge-sample"], minimum=1),
            calibration=raw["calibration"],
            dry_run=bool(config.getoption("restore_dry_run")),
            ranker=raw["ranker"] or "bm25-lite",
            ablations=bool(
                config.getoption("restore_ablations")
                if config.getoption("restore_ablations") is not None
                else config.getini("restore_ablations")
            ),
            real_models=any(
                is_real(raw[role], providers) for role in ("reader", "judge", "scorer", "robustness-reader")
            ),
        )


@dataclass(frozen=True)
class CellSpec:
    """One grid item: a policy at a budget."""

    policy: str
    budget: int
    reader: str
    primary: bool = True

    @property
    def id(self) -> str:
        """The item id in the report's words, e.g. ``fifo-80k`` (``fifo-80k-openai:gpt-5.4-mini`` for the
        robustness reader), so ``-k 8k`` selects the 8k cells and not the 80k ones."""
        return f"{self.policy}-{budget_label(self.budget)}" + ("" if self.primary else f"-{self.reader}")


class RestoreCell:
    """What a grid item gets from the ``restore_cell`` fixture."""

    def __init__(self, session: RestoreSession, spec: CellSpec, item: pytest.Item) -> None:
        self.session = session
        self.spec = spec
        self.item = item
        self.run: CellRun | None = None

    def audit(self) -> CellRun:
        """Run the cell and attach its records to the item's report."""
        audit = self.session.audit(self.spec.reader)
        policy = self.session.registry[self.spec.policy]
        self.run = audit.run_cell(policy, self.spec.budget)
        fatal = self.session.fatal_error()
        if fatal is not None:
            # A wrong key or an unknown model fails every call alike: stop at the first.
            self.item.session.shouldstop = fatal
            pytest.fail(fatal, pytrace=False)
        records: str | list[Record] = self.run.records  # one process: handed over as they are
        if not self.session.is_controller:
            # One JSON string, not a list of dicts: xdist's serializer is pure Python and
            # would take seconds over a full grid's records (each phase's report carries them).
            records = json.dumps([r.to_json() for r in self.run.records])
            self.session.share_cell(audit, self.run, records)
        self.item.user_properties.append((RECORDS_PROPERTY, records))
        self.item.user_properties.append((META_PROPERTY, self.session.meta()))
        worker = str(getattr(self.session.config, "workerinput", {}).get("workerid", "main"))
        usage = {"process": worker, "models": self.session.usage(), "calls": self.session.call_details()}
        self.item.user_properties.append((USAGE_PROPERTY, usage))
        return self.run

    def check(self) -> None:
        """Fail the item, one short line per case, when one of the cell's checks fails.

        The construct checks (PROTOCOL section 5), then the family expectations
        that concern this cell (its H1 and H3 tests; for the control, its
        positive-control contrasts), decided as the session decides them (Holm
        and the power rule included), so the items and the session's summary
        name the same cases. An expectation this run had no power to meet does
        not fail the item; the session's summary lists it.
        """
        run = self.run if self.run is not None else self.audit()
        audit = self.session.audit(self.spec.reader)
        failures = construct_checks(run, audit)
        if self.session.settings.family_checks == "fail":
            failures += [
                family_of(t.family).describe(t)
                for t in self.session.verdicts(audit, run, self.spec)
                if t.expectation_met is False and t.testable
            ]
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


#: The settings that decide what the records say (the run id is a digest of them).
RECORD_SETTINGS: tuple[str, ...] = (
    "embedded_questions",
    "budgets",
    "seeds",
    "granularity",
    "questions",
    "subset_seed",
    "reader",
    "judge",
    "scorer",
    "robustness_reader",
    "ranker",
    "ablations",
)


class RestoreSession:
    """The plugin's state for one pytest process (controller or worker)."""

    def __init__(self, config: pytest.Config, settings: RestoreSettings, providers: ProviderRegistry) -> None:
        self.config = config
        self.settings = settings
        self.providers = providers
        self.registry: PolicyRegistry = default_registry()
        config.hook.pytest_restore_register_policies(registry=self.registry, config=config)
        names = settings.policies or tuple(self.registry)
        unknown = [n for n in names if n not in self.registry]
        if unknown:
            raise pytest.UsageError(
                f"--restore-policies: unknown policy {unknown[0]!r}; registered: {', '.join(self.registry)}"
            )
        self.policies: tuple[Policy, ...] = tuple(self.registry[n] for n in names)
        self.rankers: RankerRegistry = default_rankers()
        config.hook.pytest_restore_register_rankers(registry=self.rankers, config=config)
        if settings.ranker not in self.rankers:
            raise pytest.UsageError(
                f"--restore-ranker: unknown ranker {settings.ranker!r}; registered: {', '.join(self.rankers)}"
            )
        self._audits: dict[str, Audit] = {}
        self._preload: threading.Thread | None = None  # the controller's early import of the figure module
        self._prepared = False  # the xdist controller prepared the data (``prepare``)
        self._report: _Background | None = None  # the report being written
        self._models: dict[tuple[str, str], ChatModel] = {}
        self.usage_by_process: dict[str, dict[str, Any]] = {}
        self.checks: dict[str, Any] = {}
        self._dataset: Dataset | None = None
        self.records: list[Record] = []
        self.run_meta: dict[str, Any] = {}
        self.report_path: Path | None = None
        self.failures: list[str] = []
        self.dry_run_lines: list[str] = []
        self.untestable: list[str] = []
        #: Real-model call details per process (failure causes, concurrency reached, decoding).
        self.calls_by_process: dict[str, dict[str, Any]] = {}
        #: Failure causes of models outside the grid's (the calibration's fresh judge, the audit judge).
        self.side_calls: dict[str, dict[str, Any]] = {}
        #: The grid items pytest selected (node ids; ``None`` until collection is known).
        self.selected: set[str] | None = None
        #: The items whose cell ran (their records arrived).
        self.ran: set[str] = set()
        self.calibration_json: str | None = None
        #: Lines said once at the end: the failed model calls by cause, per model.
        self.failure_summary: list[str] = []
        #: Where a partial report went (the complete one, if any, was left as it was).
        self.partial_path: Path | None = None
        self.started_utc = datetime.datetime.now(datetime.timezone.utc)
        self.is_controller = not hasattr(config, "workerinput")
        worker_input: dict[str, Any] = getattr(config, "workerinput", {})
        self.run_id: str = str(worker_input.get("restore_run") or config.stash.get(RUN_KEY, "") or uuid.uuid4().hex)

    def fingerprint(self) -> str:
        """The run id every record carries: a digest of what determines the records.

        The dataset's sha256, the prompt file's bytes and the settings in
        :data:`RECORD_SETTINGS`; not how models are reached, paced or cached,
        nor where the report goes. So the same run asked again (serial or
        under xdist, resumed from the cache, through a flaky server) has the
        same id and writes identical records, and records of runs asked
        differently cannot be mixed into one report unnoticed.
        """
        s = self.settings
        asked = {name: getattr(s, name) for name in RECORD_SETTINGS}
        asked["policies"] = [p.name for p in self.policies]
        prompts = hashlib.sha256(Path(s.prompts).read_bytes()).hexdigest() if s.prompts else None
        text = json.dumps({"settings": asked, "dataset": self.dataset().sha256, "prompts": prompts}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """On the controller, before any worker starts: the dry run."""
        if not self.is_controller:
            return
        if self.settings.dry_run:
            # Counted now, before xdist starts its workers; printed as the run's summary.
            # No item runs (see pytest_collection_modifyitems) and the run exits 0.
            problem = missing_key_problem(self.all_models(), self.settings.base_url)
            self.dry_run_lines = ([f"warning: {problem}"] if problem else []) + self.dry_run()
            return
        s = self.settings
        if s.calibration == "on" or (s.calibration == "auto" and s.uses_real_models):
            self.calibrate()
        if self.config.pluginmanager.has_plugin("dsession"):
            # The controller idles while xdist workers run the grid: load the figure's
            # plotting library now rather than when the report is due.
            self._preload = threading.Thread(target=_preload_figure, name="pytest-restore-preload", daemon=True)
            self._preload.start()

    def calibrate(self) -> None:
        """The calibration gate (docs/PROTOCOL.md section 9): stop the run before the grid when it fails."""
        s = self.settings
        fresh_judge = make_model(s.judge, "judge", self.model_options(), use_cache=False, providers=self.providers)
        try:
            result = calibrate(self.audit(), fresh_judge=fresh_judge, seed=s.subset_seed)
        finally:
            close_model(fresh_judge)
        self.checks["calibration"] = {"result": result.to_dict(), "markdown": result.render_markdown()}
        # written with the report (into the new report directory, never beside an old one)
        self.calibration_json = result.to_json()
        self.side_calls[f"judge {s.judge} (calibration repeats)"] = _call_detail(fresh_judge)
        writer = self.config.get_terminal_writer()
        fatal = self.fatal_error()
        if fatal is not None:
            pytest.exit(fatal, returncode=pytest.ExitCode.TESTS_FAILED)
        failed = self.summarise_failures({"main": self.call_details()})
        reasons = list(result.reasons)
        if failed:
            writer.sep("=", "model calls failed during the calibration gate", red=True, bold=True)
            for line in failed:
                writer.line(line, red=True)
            reasons.append(f"{sum(_failed_count(d) for d in self._all_details().values())} model calls failed")
        if reasons:
            where = self.write_partial()
            writer.sep("=", "calibration gate failed", red=True, bold=True)
            for reason in reasons:
                writer.line(reason, red=True)
            if where is not None:
                writer.line(f"partial report (calibration only): {where}")
            pytest.exit("calibration gate failed: " + "; ".join(reasons), returncode=pytest.ExitCode.TESTS_FAILED)
        writer.line(
            f"calibration gate passed: judge self-consistency {result.judge_consistency:.2f}, "
            f"oracle-answerable {result.oracle_answerable_rate:.2f}, "
            f"negative restore gain {result.negative_gain_rate:.2f}"
        )

    def judge_audit(self) -> None:
        """Re-grade a stratified sample of recorded answers with the second judge."""
        s = self.settings
        assert s.audit_judge is not None
        judge = make_model(s.audit_judge, "judge", self.model_options(), providers=self.providers)
        try:
            questions = {q.question_id: q for q in self.dataset().questions}
            result = audit_judge(
                self.records, questions, judge, self.prompts(), sample=s.audit_judge_sample, seed=s.subset_seed
            )
        finally:
            close_model(judge)
        self.side_calls[f"judge {s.audit_judge} (judge audit)"] = _call_detail(judge)
        self.checks["judge_audit"] = {"result": result.to_dict(), "markdown": result.render_markdown()}

    # -- failed model calls ------------------------------------------------------------

    def all_models(self) -> list[str]:
        """Every model name the run uses, in every role."""
        s = self.settings
        return [*s.readers, s.judge, s.scorer, *([s.audit_judge] if s.audit_judge else [])]

    def fatal_error(self) -> str | None:
        """The first authentication or unknown-model error of this process's models, in one line."""
        for (spec, role), model in self._models.items():
            fatal = getattr(model, "fatal_error", None)
            if fatal:
                return f"{role} {spec}: {fatal}"
        return None

    def call_details(self) -> dict[str, Any]:
        """Per real model of this process: failed calls by cause, the concurrency reached, the decoding sent."""
        return {
            f"{role} {spec}": _call_detail(model)
            for (spec, role), model in sorted(self._models.items())
            if is_real(spec)
        }

    def _all_details(self) -> dict[str, dict[str, Any]]:
        """Call details summed over processes, plus the models outside the grid."""
        total: dict[str, dict[str, Any]] = {}
        for details in self.calls_by_process.values():
            for name, d in details.items():
                t = total.setdefault(name, {"failures": {}, "concurrency": 0, "decoding": d.get("decoding", {})})
                for cause, n in d.get("failures", {}).items():
                    t["failures"][cause] = t["failures"].get(cause, 0) + int(n)
                t["concurrency"] = max(t["concurrency"], int(d.get("concurrency", 0)))
        total.update(self.side_calls)
        return total

    def summarise_failures(self, by_process: dict[str, dict[str, Any]] | None = None) -> list[str]:
        """One line per model whose calls failed: how many and why, grouped by cause."""
        if by_process is not None:
            self.calls_by_process.update(by_process)
        lines = []
        for name, detail in sorted(self._all_details().items()):
            failures = detail.get("failures", {})
            if not failures:
                continue
            causes = "; ".join(f"{n} x {cause}" for cause, n in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0])))
            lines.append(f"{name}: {sum(failures.values())} calls failed: {causes}")
        return lines

    def failed_run_reason(self) -> str | None:
        """Why the run does not pass because of model calls, or ``None``.

        A record excluded by a failed call lowered a cell's N; a model that was
        asked and answered nothing at all leaves nothing to audit.
        """
        lowered = sum(1 for r in self.records if str(r.get("excluded") or "").startswith("api_error"))
        lowered += sum(
            1
            for r in self.records
            if any(str(v).startswith("api_error") for v in (r.get("ablation_excluded") or {}).values())
        )
        silent = [
            name
            for name, u in sorted(self.total_usage().items())
            if int(u["failed"]) > 0 and int(u["sent"]) + int(u["cached"]) == 0
        ]
        if silent:
            return f"model calls failed: {', '.join(silent)} answered nothing"
        if lowered:
            return f"model calls failed: {lowered} records excluded, so cells lost N"
        return None

    def dry_run(self) -> list[str]:
        """Unique calls per model, what is already cached, and token estimates; no call is made."""
        s = self.settings
        options = self.model_options()
        cache = ResponseCache(options.cache_dir) if s.uses_real_models else None
        primary = self.audit()
        lines = []
        importance: dict[str, int] = {}
        scores_known = True
        if any(p.needs_importance for p in self.policies):
            scorer_requests = primary.scorer_requests()
            lines.append(cost_line("scorer", s.scorer, list(scorer_requests.values()), cache, providers=self.providers))
            for content, request in scorer_requests.items():
                if s.scorer == "fake":
                    text: str | None = str(FakeScorer.score(content))
                else:
                    text = cached_text(cache, s.scorer, request, self.providers)
                score = parse_score(text) if text is not None else None
                if score is None:
                    scores_known = False
                    break
                importance[content] = score
        judge_requests: list[ChatRequest] = []
        unknown_answers = 0
        for reader in s.readers:
            audit = self.audit(reader)
            planned: list[tuple[Question, ChatRequest]] = []
            note = ""
            for policy in self.policies:
                for budget in s.budgets:
                    if policy.needs_importance and not scores_known:
                        note = "llm-importance cells counted after scoring: upper bound"
                        planned += audit.planned_reader_requests(self.registry["fifo"], budget, {})
                        continue
                    planned += audit.planned_reader_requests(policy, budget, importance)
            lines.append(cost_line("reader", reader, [request for _, request in planned], cache, note, self.providers))
            # identical requests are sent once (and hold the same question)
            for request, question in {r: q for q, r in planned}.items():
                answer = cached_text(cache, reader, request, self.providers)
                if answer is None:
                    unknown_answers += 1
                    continue
                judge_requests.append(
                    audit.prompts.judge(question=question.question, answer=question.answer, prediction=answer)
                )
        judge = cost_line("judge", s.judge, judge_requests, cache, providers=self.providers)
        if unknown_answers:
            empty = primary.prompts.judge(question="", answer="", prediction="")
            tokens_in, tokens_out = estimate_tokens([empty], s.judge.removeprefix("openai:"))
            judge = CostLine(
                "judge",
                s.judge,
                judge.calls + unknown_answers,
                judge.cached,
                judge.input_tokens + unknown_answers * (tokens_in + READER_MAX_TOKENS),
                judge.output_tokens + unknown_answers * tokens_out,
                f"{unknown_answers:,} answers not yet known: upper bound",
            )
        lines.append(judge)
        return render_cost(lines, {model: (i, o) for model, i, o in s.prices})

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """A dry run deselects every item: it only counts what the grid would ask."""
        if self.settings.dry_run and items:
            config.hook.pytest_deselected(items=list(items))
            items[:] = []

    # -- cells shared by xdist workers -------------------------------------------

    def shared_cells(self) -> Path:
        """Where this run's workers leave their cells' records for each other."""
        return self.cache_root() / "cells" / self.run_id

    def _cell_file(self, reader: str, policy: str, budget: int) -> Path:
        digest = hashlib.sha256(f"{reader}\x1f{policy}".encode()).hexdigest()[:16]
        return self.shared_cells() / f"{digest}-{budget}.json"

    def share_cell(self, audit: Audit, run: CellRun, payload: str) -> None:
        """Leave a worker's cell records (``payload``, their JSON) where other workers can read them."""
        path = self._cell_file(audit.reader.name, run.policy, run.budget)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(payload, encoding="utf-8")
        os.replace(tmp, path)  # atomic: a reader sees the whole file or none

    def cell_records(self, audit: Audit, policy: Policy, budget: int) -> list[Record]:
        """A whole-grid cell's records: from this process, from another worker, or run here.

        The control's check needs the baselines' records at its budget; under
        xdist another worker has usually run them already, and running them
        again (redundancy above all) would cost more than the check itself.
        """
        if not audit.has_cell(policy, budget):
            path = self._cell_file(audit.reader.name, policy.name, budget)
            if path.exists():
                shared = json.loads(path.read_text(encoding="utf-8"))
                return [Record.from_json(r) for r in cast("list[dict[str, Any]]", shared)]
        return audit.run_cell(policy, budget).records

    def verdicts(self, audit: Audit, run: CellRun, spec: CellSpec) -> list[HypothesisTest]:
        """The family expectations of one grid cell, decided as the session's analysis decides them."""
        s = self.settings
        selected = [p.name for p in self.policies]
        family_settings = StatsSettings()  # the families' policy roles (baselines, control)

        def records_of(cells: Sequence[tuple[str, int]]) -> list[Record]:
            return [
                r
                for policy, budget in cells
                if policy in selected
                for r in self.cell_records(audit, self.registry[policy], budget)
            ]

        records = list(run.records)
        if spec.policy == family_settings.control:
            others = [(b, spec.budget) for b in family_settings.baselines if b in selected]
            records += [r for r in records_of(others) if r["regime"] == "b"]
        return cell_verdicts(
            records,
            spec.policy,
            spec.budget,
            budgets=s.budgets,
            family_sizes={f.name: f.size(family_settings, selected, s.budgets) for f in FAMILIES},
            fetch=records_of,
            reader=audit.reader.name,
            resamples=s.bootstrap,
            seed=s.bootstrap_seed,
        )

    def grid_records(self) -> list[Record]:
        """Every record of the session's grid, each cell reused when this run already has it."""
        records: list[Record] = []
        for spec in self.cells():
            audit = self.audit(spec.reader)
            records += self.cell_records(audit, self.registry[spec.policy], spec.budget)
        return records

    def close(self) -> None:
        """Release every model of this process."""
        for model in self._models.values():
            close_model(model)
        self._models.clear()

    def join_preload(self) -> None:
        """Wait for the figure module's early import: never leave an import running into shutdown."""
        if self._preload is not None:
            self._preload.join()
            self._preload = None

    # -- the grid ---------------------------------------------------------------

    def cells(self) -> list[CellSpec]:
        """The grid: every selected policy at every budget."""
        return [
            CellSpec(p.name, b, reader, reader == self.settings.reader)
            for reader in self.settings.readers
            for p in self.policies
            for b in self.settings.budgets
        ]

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize any test that asks for ``restore_cell`` with the grid."""
        if "restore_cell" in metafunc.fixturenames:
            cells = self.cells()
            metafunc.parametrize("restore_cell", cells, ids=[c.id for c in cells], indirect=True)

    # -- data and the audit, built once per process -----------------------------

    def data_path(self) -> Path:
        """The dataset to audit: ``--restore-data`` or the embedded default."""
        if self.settings.data:
            return Path(self.settings.data)
        from pytest_restore.synthetic.embedded import embedded_dataset, embedded_path

        questions = self.settings.embedded_questions
        if not embedded_path(self.cache_root(), questions=questions).exists():
            self.say(f"generating the embedded synthetic dataset ({questions} questions; first run only) ...")
        return embedded_dataset(self.cache_root(), questions=questions)

    def release_dataset(self) -> None:
        """On an xdist controller once the workers are starting: drop the parsed dataset.

        The controller parses the file only to stop a malformed one before any
        worker starts (and to leave the prepared cache the workers load); the
        workers do the audit, so the controller need not hold the parsed file
        through the run. What needs it later (the judge audit) loads it again
        from the prepared cache. A controller that built an audit (the
        calibration gate) keeps it.
        """
        dsession = self.config.pluginmanager.has_plugin("dsession")
        if self.is_controller and dsession and not self._audits and self._dataset is not None:
            self._dataset = None

    def dataset(self) -> Dataset:
        """The validated dataset (a malformed file ends the run with one line)."""
        if self._dataset is None:
            path = self.data_path()
            if not is_prepared(path, self.cache_root() / "prepared"):
                self.say(f"reading and validating {path.name} (first run of this file) ...")
            try:
                self._dataset = load_dataset(path, cache_dir=self.cache_root() / "prepared")
            except DataError as err:
                raise pytest.UsageError(str(err)) from None
        return self._dataset

    def model_options(self) -> ModelOptions:
        """How this process reaches real models."""
        s = self.settings
        if s.cache:
            cache_dir = Path(s.cache)
        else:
            cache_dir = self.cache_root() / "responses"
        return ModelOptions(
            cache_dir=cache_dir,
            base_url=s.base_url,
            max_concurrency=s.max_concurrency,
            rpm=s.rpm,
            tpm=s.tpm,
            max_tries=s.max_tries,
            timeout=s.timeout,
            max_retry_after=s.max_retry_after,
        )

    def cache_root(self) -> Path:
        """The project's cache directory for pytest-restore."""
        cache = getattr(self.config, "cache", None)  # absent under -p no:cacheprovider
        if cache is not None:
            return Path(cache.mkdir("restore"))
        return Path(self.config.rootpath) / ".pytest_cache" / "d" / "restore"

    def prompts(self) -> PromptSet:
        """The prompt templates: the defaults, or files from ``--restore-prompts``."""
        prompts = PromptSet()
        if self.settings.prompts:
            folder = Path(self.settings.prompts)
            if not folder.is_dir():
                raise pytest.UsageError(f"--restore-prompts: {folder} is not a directory")
            files = {f.stem: f for f in sorted(folder.glob("*.txt"))}
            try:
                prompts = prompts.with_files(files)
            except ValueError as err:
                raise pytest.UsageError(f"--restore-prompts: {err}") from None
        return prompts

    def model(self, spec: str, role: str) -> ChatModel:
        """One model object per name and role in this process (shared by the readers' audits)."""
        key = (spec, role)
        if key not in self._models:
            self._models[key] = make_model(spec, role, self.model_options(), providers=self.providers)
        return self._models[key]

    def audit(self, reader: str | None = None) -> Audit:
        """The audit of this process under a reader (the primary one by default), built on first use."""
        spec = reader or self.settings.reader
        if spec not in self._audits:
            s = self.settings
            config = AuditConfig(
                granularity=Granularity(s.granularity),
                budgets=s.budgets,
                seeds=s.seeds,
                questions=s.questions,
                subset_seed=s.subset_seed,
                ablations=s.ablations,
                cache_dir=str(self.cache_root() / "prepared"),
                run_id=self.fingerprint(),
            )
            reader_model = self.model(spec, "reader")
            dataset = self.dataset()
            where = "" if self.is_controller else f" (xdist worker {self.config.workerinput['workerid']})"  # type: ignore[attr-defined]
            if not kernels_cached_on_disk():
                self.say(COMPILING)
            self.say(f"preparing {len(dataset.questions)} histories (memory units, token counts, lexical index){where} ...")
            audit = Audit(
                dataset,
                config,
                reader=reader_model,
                judge=self.model(s.judge, "judge"),
                scorer=self.model(s.scorer, "scorer"),
                prompts=self.prompts(),
                ranker=self.rankers[s.ranker],
            )
            if isinstance(reader_model, FakeReader):
                reader_model.learn(p.history for p in audit.questions)
            self._audits[spec] = audit
        return self._audits[spec]

    def say(self, message: str) -> None:
        """One plain ``restore: ...`` progress line on the terminal (and in CI logs), at once.

        An xdist worker's output is not shown: the controller says what the
        workers do (see ``prepare``).
        """
        if not self.is_controller:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        # inside an item's call the output is captured: said past the capture, as live logging is
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if reporter is not None:
                reporter.ensure_newline()
                reporter.write_line(f"restore: {message}", flush=True)
            else:  # at configure time: no terminal reporter yet
                sys.stdout.write(f"restore: {message}\n")
                sys.stdout.flush()

    def prepare(self) -> None:
        """On an xdist controller before the workers run items: generate and validate the data once.

        Called as the workers start (a run given options) or at the first
        worker's collection (a run found to be an audit there), whichever
        comes first.

        The workers then load the prepared cache instead of each generating
        (or waiting for) the file; the controller says what they will do next,
        since their own output is not shown.
        """
        if self._prepared:
            return
        self._prepared = True
        if self.settings.data is None:
            ready = f"{len(self.dataset().questions)} questions ready"
        else:
            ready = f"{Path(self.settings.data).name} validated"  # at configure time
        if not kernels_cached_on_disk():
            self.say(f"the xdist workers start by {COMPILING}")
        self.say(f"{ready}; the xdist workers prepare their histories ...")
        if self._preload is None:  # started here when the session began at the workers' collection
            self._preload = threading.Thread(target=_preload_figure, name="pytest-restore-preload", daemon=True)
            self._preload.start()
        self.release_dataset()

    def usage(self) -> dict[str, Any]:
        """This process's cumulative use of each real model, by role and name."""
        seen: dict[str, Any] = {}
        for audit in self._audits.values():
            for role, memo in (("reader", audit.reader), ("judge", audit.judge), ("scorer", audit.scorer)):
                if is_real(memo.name, self.providers):
                    seen[f"{role} {memo.name}"] = memo.usage.to_json()
        return seen

    def meta(self) -> dict[str, Any]:
        """What the controller needs to know about the data, from the process that loaded it."""
        ds = self.dataset()
        audit = self.audit()
        return {
            "sha256": ds.sha256,
            "official": ds.is_official,
            "path": str(ds.path),
            "questions": len(ds.questions),
            "audited": len(audit.questions),
            "exclusions": audit.exclusion_counts(),
        }

    # -- gathering records --------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the records of every item (xdist forwards worker reports here).

        On the controller the records are then taken off the report, before
        other plugins see it: ``--junitxml`` would otherwise write every record
        into the XML as a property. (A worker leaves them on: xdist still has to
        send them.)
        """
        if not self.is_controller:
            return
        ours = (RECORDS_PROPERTY, META_PROPERTY, USAGE_PROPERTY)
        properties = list(report.user_properties)
        # every phase's report carries the item's properties (junitxml reads the teardown's)
        report.user_properties = [(n, v) for n, v in properties if n not in ours]
        if report.when != "call":
            return
        for name, value in properties:
            if name == RECORDS_PROPERTY:
                self.ran.add(report.nodeid)
                # records cross xdist as JSON: they become Records again here
                received = json.loads(value) if isinstance(value, str) else value
                self.records.extend(Record.of(r) for r in cast("list[Mapping[str, Any]]", received))
            elif name == META_PROPERTY:
                self.run_meta = dict(cast("dict[str, Any]", value))
            elif name == USAGE_PROPERTY:
                usage = cast("dict[str, Any]", value)
                # cumulative per process: the latest report of each process wins
                self.usage_by_process[str(usage["process"])] = dict(usage["models"])
                self.calls_by_process[str(usage["process"])] = dict(usage.get("calls", {}))

    # -- which grid items were selected -----------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The grid items selected in this process (after -k, --lf, deselection)."""
        if self.is_controller:
            self.selected = {
                item.nodeid
                for item in session.items
                if "restore_cell" in getattr(getattr(item, "callspec", None), "params", {})
            }

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        """Under xdist the workers collect: the grid items are those whose id names a cell.

        At the first worker's collection, before any item is sent: the
        embedded data is generated and prepared here, once, and said on the
        terminal (the workers' own output is not shown).
        """
        first = self.selected is None
        cells = {c.id for c in self.cells()}
        self.selected = {i for i in ids if i.endswith("]") and i.rsplit("[", 1)[-1][:-1] in cells}
        if first and self.selected and not self.settings.dry_run:
            self.prepare()

    def small_grid(self) -> bool:
        """Whether the grid is small enough that one xdist worker finishes it before two would."""
        return small_data(self.settings.data, self.settings.embedded_questions)

    def run_info(self, cells: dict[str, list[str]]) -> RunInfo:
        """Settings, dataset, exclusions and the run's checks for the report.

        The settings show what ran (the policies, budgets and readers of the
        records), not what was configured; ``cells`` names the grid cells that
        ran and those that did not.
        """
        settings = asdict(self.settings)
        settings.pop("report_dir")
        settings.pop("real_models")
        settings["data"] = Path(self.settings.data).name if self.settings.data else "embedded synthetic"
        ran_policies = {str(r["policy"]) for r in self.records}
        ran_budgets = {int(r["budget"]) for r in self.records}
        settings["policies"] = [p.name for p in self.policies if p.name in ran_policies]
        settings["budgets"] = [b for b in self.settings.budgets if b in ran_budgets]
        settings["run_id"] = self.records[0].run_id if self.records else None
        meta = dict(self.run_meta)
        exclusions = meta.pop("exclusions", {})
        meta.pop("path", None)
        if self.usage_by_process:
            settings["model_usage"] = self.total_usage()
        checks = dict(self.checks)
        checks["grid"] = {"result": cells, "markdown": _grid_markdown(cells)}
        details = self._all_details()
        if details:
            checks["model_calls"] = {"result": details, "markdown": _calls_markdown(details)}
        return RunInfo(settings=settings, dataset=meta, exclusions=exclusions, checks=checks)

    def total_usage(self) -> dict[str, Any]:
        """Real model usage summed over processes (sent calls, cache hits, failures, tokens)."""
        total: dict[str, Any] = {}
        for models in self.usage_by_process.values():
            for name, u in sorted(models.items()):
                t = total.setdefault(name, {"sent": 0, "cached": 0, "failed": 0, "input_tokens": 0, "output_tokens": 0, "served": []})
                for k in ("sent", "cached", "failed", "input_tokens", "output_tokens"):
                    t[k] += int(u[k])
                t["served"] = sorted(set(t["served"]) | set(u["served"]))
        return total

    def grid_cells(self) -> dict[str, list[str]]:
        """The grid's cells that ran (records arrived) and those that did not, by item id."""
        ran = {(str(r["reader"]), str(r["policy"]), int(r["budget"])) for r in self.records}
        out: dict[str, list[str]] = {"ran": [], "not_run": []}
        for cell in self.cells():
            done = (cell.reader, cell.policy, cell.budget) in ran  # a record's reader is the model's name
            out["ran" if done else "not_run"].append(cell.id)
        return out

    def interrupted(self, session: pytest.Session) -> str | None:
        """Why the session ended before its selected grid ran whole, or ``None``."""
        status = session.exitstatus
        if status == pytest.ExitCode.INTERRUPTED:
            return "interrupted"
        if status == pytest.ExitCode.INTERNAL_ERROR:
            return "internal error"
        if self.selected is not None:
            missing = self.selected - self.ran
            if missing:
                return f"{len(missing)} of {len(self.selected)} selected grid items did not run"
        return None

    # First: every record is in once the run loop ends. The report is written on
    # a thread while xdist shuts its workers down, and ``finish_report`` (last)
    # waits for it.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Judge the model calls, then start writing the report (whole, or partial beside it)."""
        if not self.is_controller:
            return
        shutil.rmtree(self.shared_cells(), ignore_errors=True)
        if self.usage_by_process or self.side_calls:
            self.failure_summary = self.summarise_failures()
            reason = self.failed_run_reason()
            if reason is not None:
                self.failures.append(reason)
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if not self.records:
            return
        why_partial = self.interrupted(session)
        if self.settings.audit_judge and why_partial is None:
            self.judge_audit()
        target = Path(self.settings.report_dir)
        if why_partial is not None:
            target = _partial_dir(target)
            self.partial_path = target
        self._report = _Background(self._write, self.records, self.run_info(self.grid_cells()), target, why_partial)

    def _write(self, records: list[Record], info: RunInfo, target: Path, partial: str | None) -> ReportFiles:
        """Write the report into a fresh directory beside ``target``, then swap it into place."""
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            files = write_report(records, info, staging)
            if self.calibration_json is not None:
                (staging / "calibration.json").write_text(self.calibration_json, encoding="utf-8")
            self._stamp(staging, partial)
            _swap_into_place(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if partial is None:
            # a whole report supersedes the partial one an earlier, cut-short session left
            shutil.rmtree(_partial_dir(target), ignore_errors=True)
        return dataclasses.replace(files, out_dir=target)

    def _stamp(self, out: Path, partial: str | None) -> None:
        """Provenance in summary.json and, on a partial report, the mark.

        ``session_id`` names this session; the records' ``run_id`` is a digest
        of the settings that shape them, the same for every rerun.
        """
        summary_path = out / "summary.json"
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        summary["provenance"] = {
            "package": "pytest-restore",
            "version": __version__,
            "started_utc": self.started_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "session_id": self.run_id,
            "partial": partial,
        }
        summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if partial is not None:
            report = out / "report.md"
            banner = (
                f"> **PARTIAL REPORT** ({partial}): the session did not finish its grid; "
                "the cells that did not run are listed under Grid coverage.\n\n"
            )
            report.write_text(banner + report.read_text(encoding="utf-8"), encoding="utf-8")

    def write_partial(self) -> Path | None:
        """Write what the calibration gate produced, beside the report directory, marked partial."""
        if self.calibration_json is None:
            return None
        target = _partial_dir(Path(self.settings.report_dir))
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        (staging / "calibration.json").write_text(self.calibration_json, encoding="utf-8")
        _swap_into_place(staging, target)
        return target

    def finish_report(self, session: pytest.Session) -> None:
        """Wait for the report (its errors are raised here) and apply its verdict."""
        if self.is_controller and self.settings.dry_run and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            # Nothing was meant to run. Last, because syrupy's sessionfinish ORs the
            # status the hook was called with back in.
            session.exitstatus = pytest.ExitCode.OK
        if self._report is None:
            return
        files = self._report.result()
        self._report = None
        self.report_path = files.out_dir
        self.failures += list(files.failures)
        self.untestable = list(files.untestable)
        if files.failures and self.settings.family_checks == "fail":
            # a family's expectation failed after Holm: the session fails, with no traceback
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """A short table of regime (b), where the report is, and what failed (the dry run: its table)."""
        if not self.is_controller:
            return
        if self.dry_run_lines:
            terminalreporter.write_sep("=", "restore dry run: model calls the grid needs")
            for line in self.dry_run_lines:
                terminalreporter.write_line(line, yellow=line.startswith("warning: "))
            terminalreporter.write_line("dry run: no model was called; drop --restore-dry-run to run the grid")
            return
        if self.failure_summary:
            terminalreporter.write_sep("=", "failed model calls, by model and cause", red=True, bold=True)
            for line in self.failure_summary:
                terminalreporter.write_line(line, red=True)
        if not self.records:
            for failure in self.failures:
                terminalreporter.write_line(failure, red=True)
            return
        terminalreporter.write_sep("=", "restore-counterfactual audit (regime b)")
        for line in terminal_lines(self.records):
            terminalreporter.write_line(line)
        meta = self.run_meta
        if self.settings.data is None:
            terminalreporter.write_line(f"dataset: embedded synthetic LongMemEval-S, sha256 {meta.get('sha256')}")
        elif meta.get("official"):
            terminalreporter.write_line(f"dataset: official LongMemEval-S, sha256 {meta.get('sha256')}")
        else:
            terminalreporter.write_line(
                f"warning: {Path(self.settings.data).name} is not the official longmemeval_s_cleaned.json "
                f"(sha256 {meta.get('sha256')})",
                yellow=True,
            )
        if self.partial_path is not None:
            terminalreporter.write_line(
                f"partial report (the session did not finish its grid): {self.partial_path}; "
                f"{self.settings.report_dir} was left as it was",
                yellow=True,
            )
        else:
            terminalreporter.write_line(f"report: {self.report_path}")
            not_run = self.grid_cells()["not_run"]
            if not_run:
                terminalreporter.write_line(
                    f"grid cells not selected in this run ({len(not_run)}): {', '.join(not_run)}", yellow=True
                )
        strict = self.settings.family_checks == "fail"
        if self.failures:
            red = strict or any(f.startswith("model calls failed") for f in self.failures)
            verdict = "fail the run" if red else "reported only (--restore-family-checks report)"
            terminalreporter.write_sep(
                "=", f"{len(self.failures)} expectations not met: {verdict}", red=red, yellow=not red, bold=True
            )
            for failure in self.failures:
                line_red = strict or failure.startswith("model calls failed")
                terminalreporter.write_line(failure, red=line_red, yellow=not line_red)
        for line in self.untestable:
            terminalreporter.write_line(f"not testable at this N: {line}", yellow=True)


def _partial_dir(report_dir: Path) -> Path:
    """Where a partial report goes: beside the report directory, never in it."""
    return report_dir.with_name(report_dir.name + ".partial")


def _swap_into_place(staging: Path, target: Path) -> None:
    """Replace ``target`` with the directory ``staging`` as a whole.

    Two renames in one directory: the old report is moved aside, the new one
    moved in, then the old one deleted. No file of the old report survives
    beside the new one, and at every moment a whole report sits under one of
    the two names.
    """
    old: Path | None = None
    if target.exists() or target.is_symlink():
        old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _grid_markdown(cells: dict[str, list[str]]) -> str:
    """report.md's grid coverage: the cells that ran and those that did not."""
    out = ["## Grid coverage", ""]
    out.append(f"Cells run ({len(cells['ran'])}): {', '.join(cells['ran']) or 'none'}.")
    out.append("")
    if cells["not_run"]:
        out.append(f"Cells not run ({len(cells['not_run'])}): {', '.join(cells['not_run'])}.")
    else:
        out.append("Every cell of the configured grid ran.")
    return "\n".join(out)


def _calls_markdown(details: dict[str, dict[str, Any]]) -> str:
    """report.md's real-model section: what was sent, the concurrency reached, failures by cause."""
    out = ["## Real model calls", "", "| model | decoding sent | concurrency reached | failed calls |", "|---|---|---:|---|"]
    for name, d in sorted(details.items()):
        decoding = ", ".join(f"{k}: {v}" for k, v in d.get("decoding", {}).items())
        failures = "; ".join(f"{n} x {cause}" for cause, n in sorted(d.get("failures", {}).items())) or "none"
        out.append(f"| {name} | {decoding} | {d.get('concurrency', 0)} | {failures.replace('|', '/')} |")
    return "\n".join(out)


def _call_detail(model: object) -> dict[str, Any]:
    """A real model's failed calls by cause, the concurrency it reached and what it was sent."""
    causes = getattr(model, "failure_causes", {})
    name = str(getattr(model, "model", ""))
    return {
        "failures": dict(sorted(causes.items())),
        "concurrency": int(getattr(model, "concurrency_peak", 0)),
        "decoding": describe_decoding(name) if name else {},
    }


def _failed_count(detail: dict[str, Any]) -> int:
    return sum(int(n) for n in detail.get("failures", {}).values())


def _preload_figure() -> None:
    """Import the figure module ahead of the report; a failure here is the report's to raise."""
    with contextlib.suppress(Exception):  # the report imports it again and reports what is wrong
        importlib.import_module("pytest_restore.report.figure")


class _Background(threading.Thread):
    """Run one call on a thread; ``result`` waits and re-raises what it raised."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        super().__init__(name="pytest-restore-report", daemon=True)
        self._call = (fn, args)
        self._value: Any = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        fn, args = self._call
        try:
            self._value = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread by ``result``
            self._error = exc

    def result(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._value


class _ReportWaiter:
    """The last ``pytest_sessionfinish``: waits for the report the session started."""

    def __init__(self, owner: RestoreSession) -> None:
        self.owner = owner

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.owner.finish_report(session)


def _report_dir_problem(report_dir: str) -> str | None:
    """Why the report directory could not be made, in one line, or ``None`` (nothing is created)."""
    path = Path(report_dir).absolute()
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                return f"--restore-report-dir {report_dir}: {existing} is a file, not a directory"
            if not os.access(existing, os.W_OK | os.X_OK):
                return f"--restore-report-dir {report_dir}: {existing} is not writable"
            return None
    return None


def activate(config: pytest.Config) -> RestoreSession:
    """Parse the options and register the session object (once the run is an audit)."""
    providers = default_providers()
    config.hook.pytest_restore_register_providers(registry=providers, config=config)
    settings = RestoreSettings.from_config(config, providers)
    session = RestoreSession(config, settings, providers)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "restore-session")
    config.pluginmanager.register(_ReportWaiter(session), "restore-report-waiter")
    config.add_cleanup(session.join_preload)
    if session.is_controller:
        # Known before any model call rather than after the grid. A run that names data
        # or real models is an audit: stop it now. Otherwise (this plugin loads in every
        # pytest run) only the grid's items fail, so unrelated test suites are untouched.
        problem = _report_dir_problem(settings.report_dir)
        if problem and (settings.data or settings.uses_real_models):
            raise pytest.UsageError(problem)
        if settings.prompts:
            session.prompts()  # each template is test-formatted: a bad placeholder stops the run here
        problem = missing_key_problem(session.all_models(), settings.base_url)
        if problem and not settings.dry_run:  # a dry run costs nothing: it says so and goes on
            raise pytest.UsageError(problem)
    if session.is_controller and settings.data:
        dataset = session.dataset()  # a malformed file stops the run here, before any model call
        abstention, no_gold, auditable = data_auditable(dataset, settings.granularity)
        if not auditable:
            raise pytest.UsageError(
                f"{dataset.path}: no question to audit: {len(dataset.questions)} questions, "
                f"{abstention} abstention, {no_gold} without gold evidence at {settings.granularity} granularity"
            )
    return session


__all__: Sequence[str] = ("CellSpec", "RestoreCell", "RestoreSession", "RestoreSettings")
