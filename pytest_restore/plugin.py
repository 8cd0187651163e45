"""The pytest plugin: options, the audit grid and the session report.

Hooks stay thin. ``pytest_configure`` parses the options into a
:class:`RestoreSettings` and registers a :class:`RestoreSession`, which does
the work: it parametrizes the grid (one item per policy x budget), gives each
item its cell through the ``restore_cell`` fixture, gathers the records every
item attaches to its report (from xdist workers too) and, on the controller
only, writes the report once at the end of the session.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from .audit import Audit, AuditConfig, CellRun, cell_checks
from .data import DataError, Dataset, load_dataset
from .eviction import Policy, PolicyRegistry, default_registry
from .fake import FakeJudge, FakeReader, FakeScorer
from .models import ChatModel
from .report import RunInfo, terminal_lines, write_report
from .stats import BASELINES, CONTROL, DEFAULT_SEED, HypothesisTest
from .stats import cell_checks as statistical_checks
from .units import Granularity

RECORDS_PROPERTY = "restore_records"
META_PROPERTY = "restore_meta"

# name, default, help. Every option is --restore-NAME and ini key restore_NAME.
OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("data", "", "LongMemEval-S file to audit (default: the embedded synthetic dataset)"),
    ("report-dir", "restore-report", "directory the session report is written to"),
    ("budgets", "80000,30000,8000", "store budgets in tokens, comma-separated (80k style allowed)"),
    ("policies", "", "policies to audit, comma-separated (default: every registered policy)"),
    ("seeds", "0,1,2", "seeds of the random policy, comma-separated"),
    ("granularity", "turn", "memory unit: turn or session"),
    ("questions", "", "audit a stratified, seeded subset of N questions"),
    ("subset-seed", "0", "seed of the --restore-questions subset"),
    ("reader", "fake", "reader model: fake or openai:MODEL"),
    ("judge", "fake", "judge model: fake or openai:MODEL"),
    ("scorer", "fake", "importance scorer model: fake or openai:MODEL"),
    ("embedded-questions", "100", "size of the embedded synthetic dataset"),
    ("bootstrap", "10000", "question-cluster bootstrap resamples"),
    ("bootstrap-seed", str(DEFAULT_SEED), "seed of the bootstrap"),
    ("equivalence-margin", "0.03", "margin of the TOST equivalence test on matched pairs"),
    (
        "family-checks",
        "fail",
        "fail: a hypothesis family's failed expectation fails the run; report: only report it "
        "(for runs too small to have power)",
    ),
)


def _dest(name: str) -> str:
    return "restore_" + name.replace("-", "_")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the hooks users implement to add policies."""
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--restore-*`` options, each also an ini key ``restore_*``."""
    group = parser.getgroup("restore", "restore-counterfactual audit")
    for name, default, help_ in OPTIONS:
        group.addoption(f"--restore-{name}", dest=_dest(name), default=None, help=f"{help_} [{default or 'unset'}]")
        parser.addini(_dest(name), help=help_, default=default)


def _parse_ints(option: str, text: str) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        scale = 1000 if part.endswith("k") else 1
        try:
            values.append(int(part.rstrip("k")) * scale)
        except ValueError:
            raise pytest.UsageError(f"--restore-{option}: {part!r} is not a whole number") from None
    if not values:
        raise pytest.UsageError(f"--restore-{option}: no values given")
    return tuple(values)


def _parse_float(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"--restore-{option}: {text!r} is not a number") from None
    if not 0 < value < 1:
        raise pytest.UsageError(f"--restore-{option}: {value} is not between 0 and 1")
    return value


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

    @classmethod
    def from_config(cls, config: pytest.Config) -> RestoreSettings:
        """Read the options, falling back to the ini keys."""
        raw: dict[str, str] = {}
        for name, _default, _help in OPTIONS:
            value = config.getoption(_dest(name))
            raw[name] = str(value if value is not None else config.getini(_dest(name))).strip()
        if raw["family-checks"] not in ("fail", "report"):
            raise pytest.UsageError(f"--restore-family-checks: {raw['family-checks']!r} is not fail or report")
        if raw["granularity"] not in ("turn", "session"):
            raise pytest.UsageError(f"--restore-granularity: {raw['granularity']!r} is not turn or session")
        questions = _parse_ints("questions", raw["questions"])[0] if raw["questions"] else None
        if questions is not None and questions < 1:
            raise pytest.UsageError("--restore-questions: must be at least 1")
        budgets = _parse_ints("budgets", raw["budgets"])
        if any(b < 1 for b in budgets) or len(set(budgets)) != len(budgets):
            raise pytest.UsageError("--restore-budgets: budgets must be positive and distinct")
        return cls(
            data=raw["data"] or None,
            report_dir=raw["report-dir"],
            budgets=tuple(sorted(budgets, reverse=True)),
            policies=tuple(p.strip() for p in raw["policies"].split(",") if p.strip()) or None,
            seeds=_parse_ints("seeds", raw["seeds"]),
            granularity=raw["granularity"],
            questions=questions,
            subset_seed=_parse_ints("subset-seed", raw["subset-seed"])[0],
            reader=raw["reader"],
            judge=raw["judge"],
            scorer=raw["scorer"],
            embedded_questions=_parse_ints("embedded-questions", raw["embedded-questions"])[0],
            bootstrap=_parse_ints("bootstrap", raw["bootstrap"])[0],
            bootstrap_seed=_parse_ints("bootstrap-seed", raw["bootstrap-seed"])[0],
            equivalence_margin=_parse_float("equivalence-margin", raw["equivalence-margin"]),
            family_checks=raw["family-checks"],
        )


def make_model(spec: str, role: str) -> ChatModel:
    """The model a ``--restore-reader/judge/scorer`` value names."""
    if spec == "fake":
        fakes: dict[str, type[FakeReader | FakeJudge | FakeScorer]] = {
            "reader": FakeReader,
            "judge": FakeJudge,
            "scorer": FakeScorer,
        }
        return fakes[role]()
    raise pytest.UsageError(f"--restore-{role}: unknown model {spec!r} (use 'fake')")


@dataclass(frozen=True)
class CellSpec:
    """One grid item: a policy at a budget."""

    policy: str
    budget: int

    @property
    def id(self) -> str:
        """The item id, e.g. ``fifo-80000``."""
        return f"{self.policy}-{self.budget}"


class RestoreCell:
    """What a grid item gets from the ``restore_cell`` fixture."""

    def __init__(self, session: RestoreSession, spec: CellSpec, item: pytest.Item) -> None:
        self.session = session
        self.spec = spec
        self.item = item
        self.run: CellRun | None = None

    def audit(self) -> CellRun:
        """Run the cell and attach its records to the item's report."""
        audit = self.session.audit()
        policy = self.session.registry[self.spec.policy]
        self.run = audit.run_cell(policy, self.spec.budget)
        self.item.user_properties.append((RECORDS_PROPERTY, self.run.records))
        self.item.user_properties.append((META_PROPERTY, self.session.meta()))
        return self.run

    def check(self) -> None:
        """Fail the item, in one readable block, when one of the cell's checks fails.

        The construct checks (PROTOCOL section 5), then the cell's own part of
        the hypothesis families at the raw level: its H1 construct check, its
        H3 contrast and, for the control, its positive-control contrasts
        against each baseline. Holm across a family is applied at session end.
        """
        run = self.run if self.run is not None else self.audit()
        audit = self.session.audit()
        failures = cell_checks(run, audit)
        s = self.session.settings
        records = list(run.records)
        if self.spec.policy == CONTROL:
            for name in BASELINES:
                if name in self.session.registry:
                    baseline = audit.run_cell(self.session.registry[name], self.spec.budget)
                    records += [r for r in baseline.records if r["regime"] == "b"]
        tests = statistical_checks(
            records,
            self.spec.policy,
            self.spec.budget,
            reader=audit.reader.name,
            resamples=s.bootstrap,
            seed=s.bootstrap_seed,
        )
        missed = [describe_test(t) for t in tests if t.expectation_met is False]
        if s.family_checks == "fail":
            failures += missed
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def describe_test(test: HypothesisTest) -> str:
    """One line for a hypothesis test whose expectation failed."""

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    p = test.p_holm if test.p_holm is not None else test.p_raw
    which = "p_holm" if test.p_holm is not None else "p"
    cell = f"{test.policy}" + (f" vs {test.other}" if test.other else "") + f" @ {test.budget}"
    return (
        f"{test.family} {cell} (reader {test.reader}): {test.name} {num(test.statistic)}, "
        f"CI [{num(test.ci_lo)}, {num(test.ci_hi)}], {which} {num(p)} - expectation not met"
        + (f" ({test.note})" if test.note else "")
    )


class RestoreSession:
    """The plugin's state for one pytest process (controller or worker)."""

    def __init__(self, config: pytest.Config, settings: RestoreSettings) -> None:
        self.config = config
        self.settings = settings
        self.registry: PolicyRegistry = default_registry()
        config.hook.pytest_restore_register_policies(registry=self.registry, config=config)
        names = settings.policies or tuple(self.registry)
        unknown = [n for n in names if n not in self.registry]
        if unknown:
            raise pytest.UsageError(
                f"--restore-policies: unknown policy {unknown[0]!r}; registered: {', '.join(self.registry)}"
            )
        self.policies: tuple[Policy, ...] = tuple(self.registry[n] for n in names)
        self._audit: Audit | None = None
        self._dataset: Dataset | None = None
        self.records: list[dict[str, Any]] = []
        self.run_meta: dict[str, Any] = {}
        self.report_path: Path | None = None
        self.failures: list[str] = []
        self.is_controller = not hasattr(config, "workerinput")

    # -- the grid ---------------------------------------------------------------

    def cells(self) -> list[CellSpec]:
        """The grid: every selected policy at every budget."""
        return [CellSpec(p.name, b) for p in self.policies for b in self.settings.budgets]

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
        from .embedded import embedded_dataset

        cache = self.config.cache.mkdir("restore") if self.config.cache else Path(self.config.rootpath) / ".pytest_cache" / "restore"
        return embedded_dataset(Path(cache), questions=self.settings.embedded_questions)

    def dataset(self) -> Dataset:
        """The validated dataset (a malformed file ends the run with one line)."""
        if self._dataset is None:
            try:
                self._dataset = load_dataset(self.data_path())
            except DataError as err:
                raise pytest.UsageError(str(err)) from None
        return self._dataset

    def audit(self) -> Audit:
        """The audit of this process, built on first use."""
        if self._audit is None:
            s = self.settings
            config = AuditConfig(
                granularity=Granularity(s.granularity),
                budgets=s.budgets,
                seeds=s.seeds,
                questions=s.questions,
                subset_seed=s.subset_seed,
            )
            reader = make_model(s.reader, "reader")
            audit = Audit(
                self.dataset(),
                config,
                reader=reader,
                judge=make_model(s.judge, "judge"),
                scorer=make_model(s.scorer, "scorer"),
            )
            if isinstance(reader, FakeReader):
                reader.learn(p.history for p in audit.questions)
            self._audit = audit
        return self._audit

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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the records of every item (xdist forwards worker reports here)."""
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == RECORDS_PROPERTY:
                self.records.extend(cast("list[dict[str, Any]]", value))
            elif name == META_PROPERTY:
                self.run_meta = dict(cast("dict[str, Any]", value))

    def run_info(self) -> RunInfo:
        """Settings, dataset and exclusions for the report."""
        settings = asdict(self.settings)
        settings.pop("report_dir")
        settings["data"] = Path(self.settings.data).name if self.settings.data else "embedded synthetic"
        settings["policies"] = [p.name for p in self.policies]
        meta = dict(self.run_meta)
        exclusions = meta.pop("exclusions", {})
        meta.pop("path", None)
        return RunInfo(settings=settings, dataset=meta, exclusions=exclusions)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Write the report once, on the controller."""
        if not self.is_controller or not self.records:
            return
        files = write_report(self.records, self.run_info(), self.settings.report_dir)
        self.report_path = files.out_dir
        self.failures = list(files.failures)
        if self.failures and self.settings.family_checks == "fail":
            # a family's expectation failed after Holm: the session fails, with no traceback
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """A short table of regime (b) and where the report is."""
        if not self.is_controller or not self.records:
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
        terminalreporter.write_line(f"report: {self.report_path}")
        strict = self.settings.family_checks == "fail"
        for failure in self.failures:
            terminalreporter.write_sep("=", failure, red=strict, yellow=not strict, bold=True)


SESSION_KEY = pytest.StashKey[RestoreSession]()


def pytest_configure(config: pytest.Config) -> None:
    """Parse the options and register the session object."""
    settings = RestoreSettings.from_config(config)
    session = RestoreSession(config, settings)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "restore-session")
    if session.is_controller and settings.data:
        session.dataset()  # a malformed file stops the run here, before any model call


@pytest.fixture
def restore_cell(request: pytest.FixtureRequest) -> Generator[RestoreCell, None, None]:
    """The grid cell of this item (the plugin parametrizes it over policy x budget)."""
    session = request.config.stash[SESSION_KEY]
    yield RestoreCell(session, request.param, request.node)


__all__: Sequence[str] = ("CellSpec", "RestoreCell", "RestoreSession", "RestoreSettings")
