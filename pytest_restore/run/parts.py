"""What a process of a run makes over its plan, on first use: the data read, the models, the audits.

:class:`RunParts` is shared by both roles of a session: the controller uses
it for the dry run, the calibration gate, the data's preparation and the
judge audit; the process that runs the grid's cells builds its audits from
it. Each piece is made on first use and kept for the process's life; nothing
here knows which process it is in: what to say on the terminal is the role's
to decide (``say``).
"""

from __future__ import annotations

from typing import TypedDict

from pytest_restore.audit.memo import UsageJSON
from pytest_restore.audit.run import Audit, AuditConfig, audited_questions
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.units import Granularity
from pytest_restore.exits import FAILED, IO_ERROR
from pytest_restore.libraries.guest import close_gateway, configure_gateway, run_gateway
from pytest_restore.memory.kernel_cache import cached_on_disk as kernels_cached_on_disk
from pytest_restore.memory.retrieval import Bm25Lite, Ranker
from pytest_restore.models.base import ChatModel, ServiceModel
from pytest_restore.models.decoding import describe_decoding
from pytest_restore.models.embeddings import TextVectors, embedder_of
from pytest_restore.models.fake import FakeReader
from pytest_restore.models.gateway import Gateway, gateway_for
from pytest_restore.models.interrupt import SigintHandler
from pytest_restore.models.managed import ManagedCalls
from pytest_restore.models.providers import close_model, is_real, make_model
from pytest_restore.report.inputs import DataDescription
from pytest_restore.run.embeddings import audited_texts, register_embedding_ranker
from pytest_restore.run.plan import Plan, Say, freeze_long_lived, long_lived
from pytest_restore.run.settings import RestoreSettings
from pytest_restore.run.shared import SharedCells
from pytest_restore.timeline import phase


class _Calls(TypedDict):
    failures: dict[str, int]
    concurrency: int
    decoding: dict[str, str]


class CallDetail(_Calls, total=False):
    """One real model's calls in one process: failures by cause, the concurrency reached, the decoding sent,
    and the replicas it set aside (by address: why; absent when none was, so a report without replicas
    reads as before)."""

    set_aside: dict[str, str]


class DataMeta(DataDescription, total=False):
    """The data's description as the process that loaded it sends it: ``run.dataset``, with where it is
    and the questions left out before the audit (``run.exclusions``)."""

    path: str
    exclusions: dict[str, int]


def call_detail(model: ChatModel) -> CallDetail:
    """A real model's failed calls by cause, the concurrency it reached and what it was sent (nothing for a fake)."""
    if not isinstance(model, ServiceModel):
        return {"failures": {}, "concurrency": 0, "decoding": {}}
    name = model.model
    detail: CallDetail = {
        "failures": dict(sorted(model.failure_causes.items())),
        "concurrency": int(model.concurrency_peak),
        "decoding": describe_decoding(name) if name else {},
    }
    aside = model.set_aside if isinstance(model, ManagedCalls) else {}  # a batch round's model has no replicas
    if aside:
        detail["set_aside"] = dict(sorted(aside.items()))
    return detail


#: Said when numba has not compiled the kernels yet (measured: ~9 s of a cold build on 2 busy cores).
COMPILING = "compiling the numba kernels (once after an install or upgrade: about 10 s on 2 cores) ..."


class RunParts:
    """The pieces of a run one process makes over the plan, whichever role it plays."""

    def __init__(self, plan: Plan, say: Say) -> None:
        self.plan = plan
        #: One progress line on the terminal (a worker's role passes one that says nothing: its output is not shown).
        self.say = say
        #: where the ``dense:``/``hybrid:`` rankers' vectors come from, by embedder (made on first use)
        self.vectors: dict[str, TextVectors] | None = None
        self._audits: dict[str, Audit] = {}
        self._models: dict[tuple[str, str], ChatModel] = {}
        # the memory libraries' model calls go to the run's gateway, made when a library's store first needs it
        configure_gateway(self.gateway)
        # Ctrl-C ends the model calls in flight and the gateway's waits at once, not after their timeouts
        self._sigint = SigintHandler()
        self._sigint.install()

    def gateway(self) -> Gateway:
        """The run's gateway for memory libraries (not started): the writer model upstream, the writer embedder's vectors."""
        s = self.settings
        options = s.model_options(self.plan.cache_root, run=self.plan.session_id)
        return gateway_for(s.writer_model, s.writer_embedder, options, self.plan.registries.providers)

    @property
    def settings(self) -> RestoreSettings:
        """The plan's settings (one object for the whole run)."""
        return self.plan.settings

    # -- the data -------------------------------------------------------------------

    def dataset(self) -> Dataset:
        """The validated dataset (a malformed file is a one-line ``SettingsError``)."""
        return self.plan.data.dataset()

    def release_dataset(self) -> None:
        """Drop the parsed dataset unless an audit was built on it (what needs it later loads it again)."""
        if not self._audits:
            self.plan.data.release()

    def meta(self) -> DataMeta:
        """What the controller needs to know about the data, from the process that loaded it."""
        ds = self.dataset()
        audit = self.audit()
        errata = self.plan.data.errata
        meta: DataMeta = {
            "sha256": ds.sha256,
            "official": ds.is_official,
            "path": str(ds.path),
            "dataset": ds.name,
            "questions": len(ds.questions) + len(ds.excluded),
            "audited": len(audit.questions),
            "exclusions": audit.exclusion_counts(),
            "repairs": dict(ds.repairs),
            "histories": len({p.question.history_key for p in audit.questions}),
            "budget_binding": {str(b): share for b, share in audit.budget_binding(self.settings.budgets).items()},
        }
        if errata is not None and errata.summary:
            meta["errata"] = errata.summary.to_json()
        return meta

    def shared_cells(self) -> SharedCells:
        """Where this run's processes leave their cells' records for each other."""
        return SharedCells(self.plan.cache_root / "cells" / self.plan.session_id)

    # -- the models and the audits -------------------------------------------------------

    def model(self, spec: str, role: str) -> ChatModel:
        """One model object per name and role in this process (shared by the readers' audits)."""
        key = (spec, role)
        if key not in self._models:
            # run: this run's processes share a call that failed for good, as they share a success
            options = self.settings.model_options(self.plan.cache_root, run=self.plan.session_id)
            self._models[key] = make_model(spec, role, options, providers=self.plan.registries.providers)
        return self._models[key]

    def audit_config(self) -> AuditConfig:
        """The settings of this session's audits."""
        s = self.settings
        loader, errata = self.plan.data.loader, self.plan.data.errata
        # a forced loader reads the same file otherwise: its name joins the data's digest (absent: ids as before);
        # so do the errata applied
        data = self.dataset().sha256 + (f":{loader}" if loader else "") + (errata.identity() if errata is not None else "")
        return AuditConfig(
            granularity=Granularity(s.granularity),
            budgets=s.budgets,
            seeds=s.seeds,
            questions=s.questions,
            subset_seed=s.subset_seed,
            ablations=s.ablations,
            cache_dir=str(self.plan.cache_root / "prepared"),
            run_id=s.fingerprint([p.name for p in self.plan.policies], data),
            concurrency=s.max_concurrency,  # a memory library's histories fed at once, as its calls may go
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
            with phase("histories prepared"), long_lived():
                audit = Audit(
                    dataset,
                    config,
                    reader=reader_model,
                    judge=self.model(s.judge, "judge"),
                    scorer=self.model(s.scorer, "scorer"),
                    prompts=self.settings.prompt_set(),
                    rankers=self.grid_rankers(),
                    # the memory systems that write with a model: --restore-writer-model's, else this reader writes
                    writer=self.model(s.writer, "writer") if s.writer and s.writer != spec else None,
                )
            if isinstance(reader_model, FakeReader):
                with phase("the fake reader learned the histories"):
                    reader_model.learn(p.history for p in audit.questions)
            freeze_long_lived("prepared")  # the histories, and numba's front end their kernels loaded
            self._audits[spec] = audit
        return self._audits[spec]

    def ranker_vectors(self) -> list[TextVectors]:
        """The vectors' sources of the run's ``dense:``/``hybrid:`` rankers, one per embedder (the rankers registered on first use)."""
        if self.vectors is None:
            options = self.settings.model_options(self.plan.cache_root)
            self.vectors = {}
            for name in self.settings.grid_rankers:
                register_embedding_ranker(
                    self.plan.registries.rankers, name, options, self.settings.embed_limits, self.say, self.vectors
                )
        return list(self.vectors.values())

    def grid_rankers(self) -> list[Ranker]:
        """The rankers the grid reads with; a dry run plans a dense one whose vectors are not stored yet with bm25-lite."""
        missing = {
            vectors.name for vectors in self.ranker_vectors()
            if self.settings.dry_run and vectors.missing(audited_texts(self.dataset(), self.audit_config()))
        }
        rankers = self.plan.registries.rankers
        chosen = [rankers[name] for name in self.settings.grid_rankers if embedder_of(name) not in missing]
        return chosen or [Bm25Lite()]  # a dry run sends nothing, embeddings included

    # -- this process's model calls --------------------------------------------------------

    def usage(self) -> dict[str, UsageJSON]:
        """This process's cumulative use of each real model, by role and name."""
        seen: dict[str, UsageJSON] = {}
        for audit in self._audits.values():
            roles = [("reader", audit.reader), ("judge", audit.judge), ("scorer", audit.scorer)]
            if audit.writer is not audit.reader:
                roles.append(("writer", audit.writer))
            for role, memo in roles:
                if is_real(memo.name, self.plan.registries.providers):
                    seen[f"{role} {memo.name}"] = memo.usage.to_json()
        gateway = run_gateway()
        if gateway is not None and is_real(self.settings.writer_model, self.plan.registries.providers):
            u = gateway.usage  # the memory libraries' own calls, through the gateway
            seen[f"library-writer {self.settings.writer_model}"] = {
                "sent": u.sent, "cached": u.cached, "failed": u.failed, "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens, "served": [],
            }
        embedder = self.settings.writer_embedder
        if gateway is not None and embedder is not None and is_real(embedder, self.plan.registries.providers):
            u = gateway.usage  # their embeddings: texts embedded upstream (sent) or read from disk (cached)
            seen[f"library-embedder {embedder}"] = {
                "sent": u.embedded_upstream, "cached": u.embedded_texts - u.embedded_upstream, "failed": 0,
                "input_tokens": u.embedded_tokens, "output_tokens": 0, "served": [],
            }
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
        return IO_ERROR if io else FAILED

    def call_details(self) -> dict[str, CallDetail]:
        """Per real model of this process: failed calls by cause, the concurrency reached, the decoding sent."""
        return {
            f"{role} {spec}": call_detail(model)
            for (spec, role), model in sorted(self._models.items())
            if is_real(spec, self.plan.registries.providers) and isinstance(model, ServiceModel)
        }

    def close(self) -> None:
        """Release every model of this process."""
        for model in self._models.values():
            close_model(model)
        self._models.clear()
        close_gateway()
        for vectors in (self.vectors or {}).values():
            vectors.close()
        self._sigint.restore()
