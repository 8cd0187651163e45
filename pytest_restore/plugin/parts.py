"""What every process of an audit builds once: the registries, the grid, the data, the models, the audits.

:class:`AuditParts` is shared by both roles of a session: the controller
(``plugin/controller.py``) uses it for the dry run, the calibration gate, the
data's preparation and the judge audit; the process that runs the grid's
cells (``plugin/runner.py``, an xdist worker's ``plugin/worker.py``) builds
its audits from it. Each piece is made on first use and kept for the
process's life; nothing here knows which process it is in: what to say on
the terminal is the role's to decide (``say``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.audit.run import Audit, AuditConfig, audited_questions
from pytest_restore.data.dataset import LONGMEMEVAL_BUDGETS, DataError, Dataset
from pytest_restore.data.errata import (
    ErrataSummary,
    apply_errata,
    default_errata_formats,
    load_errata,
    parse_parts,
)
from pytest_restore.data.loaders import (
    DatasetRegistry,
    data_is_prepared,
    default_datasets,
    load_data,
)
from pytest_restore.data.units import Granularity
from pytest_restore.exits import IO_ERROR, out_file_problem
from pytest_restore.memory.eviction import Policy, PolicyRegistry, default_registry
from pytest_restore.memory.kernels import cached_on_disk as kernels_cached_on_disk
from pytest_restore.memory.retrieval import Bm25Lite, Ranker, RankerRegistry, default_rankers
from pytest_restore.models.base import ChatModel, ServiceModel
from pytest_restore.models.embeddings import TextVectors, embedder_of
from pytest_restore.models.fake import FakeReader
from pytest_restore.models.providers import ProviderRegistry, close_model, is_real, make_model
from pytest_restore.plugin.calls import call_detail
from pytest_restore.plugin.cells import CellSpec, SharedCells, grid
from pytest_restore.plugin.rankers import audited_texts, register_embedding_ranker
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.stats.families import Family, default_families

#: Said when numba has not compiled the kernels yet (measured: ~9 s of a cold build on 2 busy cores).
COMPILING = "compiling the numba kernels (once after an install or upgrade: about 10 s on 2 cores) ..."


class AuditParts:
    """The pieces of an audit one pytest process builds once, whichever role it plays."""

    def __init__(
        self,
        config: pytest.Config,
        settings: RestoreSettings,
        providers: ProviderRegistry,
        run_id: str,
        say: Callable[[str], None],
    ) -> None:
        self.config = config
        if not settings.budgets and not settings.data:  # the embedded default: LongMemEval-S's budgets
            settings = _with_budgets(settings, LONGMEMEVAL_BUDGETS)
        self.settings = settings
        self.providers = providers
        #: This session's id: the directory its processes share cells in (``shared_cells``).
        self.run_id = run_id
        #: One progress line on the terminal (a worker's role passes one that says nothing: its output is not shown).
        self.say = say
        self.registry: PolicyRegistry = default_registry()
        config.hook.pytest_restore_register_policies(registry=self.registry, config=config)
        names = settings.policies or tuple(self.registry)
        unknown = [n for n in names if n not in self.registry]
        if unknown:
            raise pytest.UsageError(
                f"{settings.source('policies')}: unknown policy {unknown[0]!r}; registered: {', '.join(self.registry)}"
            )
        self.policies: tuple[Policy, ...] = tuple(self.registry[n] for n in names)
        families = default_families()
        config.hook.pytest_restore_register_families(registry=families, config=config)
        #: The hypothesis families the statistics pass runs, built-ins first.
        self.families: tuple[Family, ...] = tuple(families.values())
        self.rankers: RankerRegistry = default_rankers()
        config.hook.pytest_restore_register_rankers(registry=self.rankers, config=config)
        #: where the ``dense:``/``hybrid:`` rankers' vectors come from, by embedder (made on first use, ``plugin/rankers.py``)
        self.vectors: dict[str, TextVectors] | None = None
        unknown_ranker = next((n for n in settings.grid_rankers if n not in self.rankers and embedder_of(n) is None), None)
        if unknown_ranker is not None:
            raise pytest.UsageError(
                f"{settings.source('rankers' if settings.rankers else 'ranker')}: unknown ranker {unknown_ranker!r}; "
                f"registered: {', '.join(self.rankers)}, or dense:EMBEDDER, hybrid:EMBEDDER"
            )
        #: The dataset loaders ``--restore-data`` is read with (picked by shape or ``--restore-dataset``).
        self.datasets: DatasetRegistry = default_datasets()
        config.hook.pytest_restore_register_datasets(registry=self.datasets, config=config)
        #: ``--restore-dataset`` (read here: only the data's loading needs it), ``None``: picked by the file's shape
        self.dataset_name: str | None = str(config.getoption("restore_dataset") or config.getini("restore_dataset")).strip() or None
        if self.dataset_name is not None and not settings.data:
            raise pytest.UsageError(f"{settings.source('dataset')}: names the loader of --restore-data, which is not given")
        if self.dataset_name is not None and self.dataset_name not in self.datasets:
            raise pytest.UsageError(
                f"{settings.source('dataset')}: unknown dataset loader {self.dataset_name!r}; registered: {', '.join(self.datasets)}"
            )
        self.errata = ErrataOption.of(config, settings)
        problem = settings.batch_export and out_file_problem(settings.batch_export, settings.source("batch-export"))
        if problem:  # before any work, as a report directory that cannot be written is
            raise pytest.UsageError(problem)
        #: The grid: every selected policy at every budget, under each reader.
        self.cells: list[CellSpec] = grid(settings, self.policies)
        self._audits: dict[str, Audit] = {}
        self._models: dict[tuple[str, str], ChatModel] = {}
        self._dataset: Dataset | None = None
        self._said_loader = False  # which loader read the file is said once

    # -- the data -------------------------------------------------------------------

    def cache_root(self) -> Path:
        """The project's cache directory for pytest-restore."""
        cache = getattr(self.config, "cache", None)  # absent under -p no:cacheprovider
        if cache is not None:
            return Path(cache.mkdir("restore"))
        return Path(self.config.rootpath) / ".pytest_cache" / "d" / "restore"

    def data_path(self) -> Path:
        """The dataset to audit: ``--restore-data`` or the embedded default."""
        if self.settings.data:
            return Path(self.settings.data)
        from pytest_restore.synthetic.embedded import embedded_dataset, embedded_path

        questions = self.settings.embedded_questions
        if not embedded_path(self.cache_root(), questions=questions).exists():
            self.say(f"generating the embedded synthetic dataset ({questions} questions; first run only) ...")
        return embedded_dataset(self.cache_root(), questions=questions)

    def dataset(self) -> Dataset:
        """The validated dataset (a malformed file ends the run with one line)."""
        if self._dataset is None:
            path = self.data_path()
            prepared, name = self.cache_root() / "prepared", self.dataset_name
            if not data_is_prepared(path, prepared, self.datasets, name):
                self.say(f"reading and validating {path.name} (first run of this file) ...")
            try:
                self._dataset = load_data(path, self.datasets, name=name, cache_dir=prepared)
                if self.errata is not None:
                    self._dataset, self.errata.summary = self.errata.apply(self._dataset)
            except DataError as err:
                raise pytest.UsageError(str(err)) from None
            if self.settings.data and not self._said_loader:
                self._said_loader = True
                self.say(loaded_line(self._dataset, forced=name is not None))
                if self.errata is not None and self.errata.summary is not None:
                    self.say(errata_line(self.errata.summary))
            self.use_dataset_budgets()
        return self._dataset

    def use_dataset_budgets(self) -> None:
        """The dataset's default budgets, unless ``--restore-budgets`` named some: the grid follows.

        Applied when the dataset is loaded, which every process does as its
        session begins (the controller checks the file; a worker reads the
        copy its controller prepared), so every process has the same grid.
        """
        if self.settings.budgets or not self.settings.data:  # given (or already the data's), or the embedded default
            return
        budgets = self.dataset().budgets
        if tuple(sorted(budgets, reverse=True)) != self.settings.budgets:
            self.settings = _with_budgets(self.settings, tuple(sorted(budgets, reverse=True)))
            self.cells = grid(self.settings, self.policies)

    def release_dataset(self) -> None:
        """Drop the parsed dataset unless an audit was built on it (what needs it later loads it again)."""
        if not self._audits:
            self._dataset = None

    def meta(self) -> dict[str, Any]:
        """What the controller needs to know about the data, from the process that loaded it."""
        ds = self.dataset()
        audit = self.audit()
        return {
            "sha256": ds.sha256,
            "official": ds.is_official,
            "path": str(ds.path),
            "dataset": ds.name,
            "questions": len(ds.questions) + len(ds.excluded),
            "audited": len(audit.questions),
            "exclusions": audit.exclusion_counts(),
            "repairs": dict(ds.repairs),
            **({"errata": self.errata.summary.to_json()} if self.errata is not None and self.errata.summary else {}),
            "histories": len({p.question.history_key for p in audit.questions}),
            "budget_binding": {str(b): share for b, share in audit.budget_binding(self.settings.budgets).items()},
        }

    def shared_cells(self) -> SharedCells:
        """Where this run's processes leave their cells' records for each other."""
        return SharedCells(self.cache_root() / "cells" / self.run_id)

    # -- the models and the audits -------------------------------------------------------

    def model(self, spec: str, role: str) -> ChatModel:
        """One model object per name and role in this process (shared by the readers' audits)."""
        key = (spec, role)
        if key not in self._models:
            # run: this run's processes share a call that failed for good, as they share a success
            options = self.settings.model_options(self.cache_root(), run=self.run_id)
            self._models[key] = make_model(spec, role, options, providers=self.providers)
        return self._models[key]

    def audit_config(self) -> AuditConfig:
        """The settings of this session's audits."""
        s = self.settings
        return AuditConfig(
            granularity=Granularity(s.granularity),
            budgets=s.budgets,
            seeds=s.seeds,
            questions=s.questions,
            subset_seed=s.subset_seed,
            ablations=s.ablations,
            cache_dir=str(self.cache_root() / "prepared"),
            # a forced loader reads the same file otherwise: its name joins the data's digest (absent: ids as before)
            run_id=s.fingerprint([p.name for p in self.policies], self.dataset().sha256 + (f":{self.dataset_name}" if self.dataset_name else "")
                                 + (self.errata.identity() if self.errata is not None else "")),
        )

    def audit(self, reader: str | None = None) -> Audit:
        """The audit of this process under a reader (the primary one by default), built on first use."""
        spec = reader or self.settings.reader
        if spec not in self._audits:
            s = self.settings
            config = self.audit_config()
            reader_model = self.model(spec, "reader")
            dataset = self.dataset()
            if not kernels_cached_on_disk():
                self.say(COMPILING)
            planned = len(audited_questions(dataset, config))
            self.say(f"preparing {planned} histories (memory units, token counts, lexical index) ...")
            audit = Audit(
                dataset,
                config,
                reader=reader_model,
                judge=self.model(s.judge, "judge"),
                scorer=self.model(s.scorer, "scorer"),
                prompts=self.settings.prompt_set(),
                rankers=self.grid_rankers(),
            )
            if isinstance(reader_model, FakeReader):
                reader_model.learn(p.history for p in audit.questions)
            self._audits[spec] = audit
        return self._audits[spec]

    def ranker_vectors(self) -> list[TextVectors]:
        """The vectors' sources of the run's ``dense:``/``hybrid:`` rankers, one per embedder (the rankers registered on first use)."""
        if self.vectors is None:
            options = self.settings.model_options(self.cache_root())
            self.vectors = {}
            for name in self.settings.grid_rankers:
                register_embedding_ranker(self.rankers, name, options, self.settings.embed_limits, self.say, self.vectors)
        return list(self.vectors.values())

    def grid_rankers(self) -> list[Ranker]:
        """The rankers the grid reads with; a dry run plans a dense one whose vectors are not stored yet with bm25-lite."""
        missing = {
            vectors.name for vectors in self.ranker_vectors()
            if self.settings.dry_run and vectors.missing(audited_texts(self.dataset(), self.audit_config()))
        }
        rankers = [self.rankers[name] for name in self.settings.grid_rankers if embedder_of(name) not in missing]
        return rankers or [Bm25Lite()]  # a dry run sends nothing, embeddings included

    # -- this process's model calls --------------------------------------------------------

    def usage(self) -> dict[str, Any]:
        """This process's cumulative use of each real model, by role and name."""
        seen: dict[str, Any] = {}
        for audit in self._audits.values():
            for role, memo in (("reader", audit.reader), ("judge", audit.judge), ("scorer", audit.scorer)):
                if is_real(memo.name, self.providers):
                    seen[f"{role} {memo.name}"] = memo.usage.to_json()
        return seen

    def fatal_error(self) -> str | None:
        """The first authentication or unknown-model error of this process's models, in one line."""
        for (spec, role), model in self._models.items():
            if isinstance(model, ServiceModel) and model.fatal_error:
                return f"{role} {spec}: {model.fatal_error}"
        return None

    def fatal_exit_code(self) -> int:
        """The exit status of a run stopped by :meth:`fatal_error`: 74 when a file could not be written (the response cache on a full disk), else 1."""
        io = any(isinstance(m, ServiceModel) and m.fatal_error and m.fatal_io for m in self._models.values())
        return IO_ERROR if io else int(pytest.ExitCode.TESTS_FAILED)

    def call_details(self) -> dict[str, Any]:
        """Per real model of this process: failed calls by cause, the concurrency reached, the decoding sent."""
        return {
            f"{role} {spec}": call_detail(model)
            for (spec, role), model in sorted(self._models.items())
            if is_real(spec, self.providers) and isinstance(model, ServiceModel)
        }

    def close(self) -> None:
        """Release every model of this process."""
        for model in self._models.values():
            close_model(model)
        self._models.clear()
        for vectors in (self.vectors or {}).values():
            vectors.close()



def loaded_line(dataset: Dataset, *, forced: bool) -> str:
    """What the controller says once the data file is read: which loader, and what it left out."""
    how = "as --restore-dataset asks" if forced else "picked from the file's shape"
    line = f"{Path(dataset.path).name} read as {dataset.name} ({how}): {len(dataset.questions)} questions"
    if dataset.excluded:
        line += f", {len(dataset.excluded)} left out (counted in the report)"
    repaired = sum(n for _, n in dataset.repairs)
    if repaired:
        line += f", {repaired} flawed evidence references handled by the loader's rule (by kind in the report)"
    return line


class ErrataOption:
    """``--restore-errata FILE`` (with ``--restore-errata-apply`` and ``--restore-errata-format``), read and checked."""

    def __init__(self, config: pytest.Config, path: str, parts: tuple[str, ...], format_name: str | None) -> None:
        self.path = path
        self.parts = parts
        self.formats = default_errata_formats()
        config.hook.pytest_restore_register_errata(registry=self.formats, config=config)
        if format_name is not None and format_name not in self.formats:
            raise pytest.UsageError(
                f"--restore-errata-format: unknown errata format {format_name!r}; registered: {', '.join(self.formats)}"
            )
        self.format_name = format_name
        #: what the file did to the dataset, once applied
        self.summary: ErrataSummary | None = None

    @classmethod
    def of(cls, config: pytest.Config, settings: RestoreSettings) -> ErrataOption | None:
        """The option as given (``None``: no errata); an unknown part or format, or errata without data, is a usage error."""

        def value(name: str) -> str:
            return str(config.getoption(name) or config.getini(name) or "").strip()

        path, apply, format_name = value("restore_errata"), value("restore_errata_apply") or "evidence", value("restore_errata_format")
        if not path:
            if format_name or config.getoption("restore_errata_apply") is not None:
                raise pytest.UsageError("--restore-errata-apply/--restore-errata-format: name the corrections of --restore-errata, which is not given")
            return None
        if not settings.data:
            raise pytest.UsageError("--restore-errata: corrects --restore-data, which is not given (the embedded dataset has no errata)")
        try:
            parts = parse_parts(apply)
        except ValueError as err:
            raise pytest.UsageError(f"--restore-errata-apply: {err}") from None
        return cls(config, path, parts, format_name or None)

    def apply(self, dataset: Dataset) -> tuple[Dataset, ErrataSummary]:
        """The dataset with the corrections applied (a malformed file raises a one-line ``DataError``)."""
        data, format_name, corrections = load_errata(self.path, dataset, self.formats, name=self.format_name)
        return apply_errata(dataset, data, format_name, corrections, self.parts)

    def identity(self) -> str:
        """What the run id adds for the errata: the file's sha256 and the parts applied."""
        sha = self.summary.sha256 if self.summary is not None else "unread"
        return f":errata={sha}:{'+'.join(self.parts)}"


def errata_line(summary: ErrataSummary) -> str:
    """What the controller says once the corrections are applied."""
    total = {key: sum(counts[key] for _, counts in summary.by_type) for key in ErrataSummary.COUNTS}
    return (
        f"{Path(summary.path).name} read as {summary.format}: {summary.read} corrections "
        f"({', '.join(f'{n} {kind}' for kind, counts in summary.by_type for n in [counts['read']])}); "
        f"applied ({', '.join(summary.parts)}): {total['evidence']} evidence, {total['answer']} answers replaced, "
        f"{total['unanswerable']} questions excluded as unanswerable, {total['not_applied']} to questions left out"
    )


def _with_budgets(settings: RestoreSettings, budgets: tuple[int, ...]) -> RestoreSettings:
    """``settings`` with ``budgets``, still knowing where each value came from (for error messages)."""
    changed = dataclasses.replace(settings, budgets=budgets)
    object.__setattr__(changed, "_sources", getattr(settings, "_sources", {}))
    return changed
