"""The audit's settings: every option of a run (:class:`~pytest_restore.run.options.RawOptions`) parsed and checked.

:class:`RestoreSettings` holds plain values, the same in every process of a
run, every default resolved (the budgets: ``--restore-budgets``, else the
data's loader's); a value that does not parse is a :class:`SettingsError`
naming the option or ini key, raised before any work. Settings are built
once (:meth:`RestoreSettings.parse`) and never replaced.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_restore.data.catalogue import NotFetched, resolve_name
from pytest_restore.models.batch import BatchOptions
from pytest_restore.models.prompts import JUDGE_FORMATS, PromptSet
from pytest_restore.models.providers import (
    ModelOptions,
    ModelSpecError,
    ProviderRegistry,
    can,
    check_spec,
    is_real,
    parse_price,
    providers_with,
    reply_problem,
)
from pytest_restore.run.options import RawOptions
from pytest_restore.settings import AuditSettings


class SettingsError(ValueError):
    """An option, or the data or directory it names, that the run cannot use: one line naming where it was given."""


#: Fewer bootstrap resamples than this give intervals too coarse to read.
MIN_RESAMPLES = 100


def _items(where: str, text: str) -> list[str]:
    """The comma-separated items of a list option; an empty item is an error, not skipped."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip():
        raise SettingsError(f"{where}: no values given")
    if any(not part for part in parts):
        raise SettingsError(f"{where}: empty item in {text!r}")
    return parts


def _parse_int(where: str, text: str, *, minimum: int = 0) -> int:
    """One whole number (``80k`` allowed), at least ``minimum``."""
    part = text.strip().lower()
    scale = 1000 if part.endswith("k") else 1
    try:
        value = int(part.removesuffix("k")) * scale
    except ValueError:
        raise SettingsError(f"{where}: {text.strip()!r} is not a whole number") from None
    if value < minimum:
        raise SettingsError(f"{where}: {text.strip()!r} is below the minimum of {minimum}")
    return value


def _parse_ints(where: str, text: str, *, minimum: int = 0) -> tuple[int, ...]:
    """Distinct whole numbers, comma-separated: a repeated value (``80k,80000``) is an error."""
    values: dict[int, str] = {}
    for part in _items(where, text):
        value = _parse_int(where, part, minimum=minimum)
        if value in values:
            raise SettingsError(f"{where}: {part!r} repeats {values[value]!r}")
        values[value] = part
    return tuple(values)


def _parse_number(where: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise SettingsError(f"{where}: {text!r} is not a finite number")
    return value


def _parse_float(where: str, text: str) -> float:
    """A finite number strictly between 0 and 1."""
    value = _parse_number(where, text)
    if not 0 < value < 1:
        raise SettingsError(f"{where}: {value} is not between 0 and 1")
    return value


def _parse_positive(where: str, text: str) -> float:
    """A finite number above 0."""
    value = _parse_number(where, text)
    if value <= 0:
        raise SettingsError(f"{where}: must be positive")
    return value


def _parse_names(where: str, text: str) -> tuple[str, ...] | None:
    """Distinct names, comma-separated (``None`` when the option is unset)."""
    if not text:
        return None
    names = _items(where, text)
    repeated = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if repeated is not None:
        raise SettingsError(f"{where}: {repeated!r} is given twice")
    return tuple(names)


@dataclass(frozen=True, kw_only=True)
class RestoreSettings(AuditSettings):
    """The parsed options: plain values, the same on the controller and every worker.

    Every setting a report shows is declared once, on :class:`~pytest_restore.settings.AuditSettings`;
    these fields are the run's own, which no report shows.
    """

    #: where the report goes
    report_dir: str
    #: whether any model of the grid is a real one (its provider says so)
    real_models: bool = False
    #: ``--restore-writer-embedder``: what the memory libraries embed with through the gateway (``None``: the fake)
    writer_embedder: str | None = None
    #: ``--restore-dataset``: the loader ``data`` is read with (``None``: picked by the file's shape; the
    #: report names the loader that read it, in ``run.dataset``)
    dataset: str | None = None
    #: where each option's value came from (error messages name it)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def source(self, name: str) -> str:
        """Where the value of option ``name`` (``policies``) came from, as an error message names it:
        ``--restore-policies`` or ``ini key restore_policies (pytest.ini)``."""
        return self.sources.get(name, f"--restore-{name}")

    @property
    def readers(self) -> tuple[str, ...]:
        """The primary reader, then the robustness reader if any."""
        return (self.reader,) + ((self.robustness_reader,) if self.robustness_reader else ())

    @property
    def writer_model(self) -> str:
        """The model the memory systems that write with a model write with: ``--restore-writer-model``, else the reader."""
        return self.writer or self.reader

    @property
    def uses_real_models(self) -> bool:
        """Whether any model of the grid is a real one."""
        return self.real_models

    def all_models(self) -> list[str]:
        """Every model name the run uses, in every role (the rankers' embedder included)."""
        from pytest_restore.models.embeddings import embedder_of

        embedders = list(dict.fromkeys(e for e in map(embedder_of, self.grid_rankers) if e))
        extra = [self.audit_judge] if self.audit_judge else []
        writer = [self.writer] if self.writer and self.writer not in self.readers else []
        return [*self.readers, self.judge, self.scorer, *writer, *extra, *embedders]

    @property
    def grid_rankers(self) -> tuple[str, ...]:
        """The rankers the grid reads with: ``--restore-rankers``, else the one ``--restore-ranker``."""
        return self.rankers or (self.ranker,)

    def model_options(self, cache_root: Path, run: str | None = None) -> ModelOptions:
        """How real models are reached (the response cache under ``cache_root`` unless ``--restore-cache`` names one).

        ``run`` names the session: its processes share their failed calls through the cache.
        """
        return ModelOptions(
            run=run,
            cache_dir=Path(self.cache) if self.cache else cache_root / "responses",
            base_url=self.base_url,
            max_concurrency=self.max_concurrency,
            rpm=self.rpm,
            tpm=self.tpm,
            max_tries=self.max_tries,
            timeout=self.timeout,
            max_retry_after=self.max_retry_after,
            batch=BatchOptions(poll=self.batch_poll, resubmit=self.batch_resubmit) if self.batch else None,
        )

    def prompt_set(self) -> PromptSet:
        """The prompt templates: the defaults, or files from ``--restore-prompts``."""
        prompts = PromptSet(judge_format=self.judge_format)
        if self.prompts:
            folder = Path(self.prompts)
            if not folder.is_dir():
                raise SettingsError(f"{self.source('prompts')}: {folder} is not a directory")
            files = {f.stem: f for f in sorted(folder.glob("*.txt"))}
            try:
                prompts = prompts.with_files(files)
            except ValueError as err:
                raise SettingsError(f"{self.source('prompts')}: {err}") from None
        return prompts

    def fingerprint(self, policies: Sequence[str], dataset_sha256: str) -> str:
        """The run id every record carries: a digest of what determines the records.

        The dataset's sha256, the selected ``policies``, the prompt file's
        bytes and the settings in :data:`RECORD_SETTINGS`; not how models are reached, paced or cached,
        nor where the report goes. So the same run asked again (serial or
        under xdist, resumed from the cache, through a flaky server) has the
        same id and writes identical records, and records of runs asked
        differently cannot be mixed into one report unnoticed.
        """
        s = self
        asked = {name: getattr(s, name) for name in RECORD_SETTINGS}
        if not s.rankers:
            del asked["rankers"]  # a one-ranker run keeps the id it had before the option existed
        if not s.writer:
            del asked["writer"]  # nor does a run whose readers write
        if s.judge_format == "text":
            del asked["judge_format"]  # likewise a one-word judge
        asked["policies"] = list(policies)
        prompts = hashlib.sha256(Path(s.prompts).read_bytes()).hexdigest() if s.prompts else None
        text = json.dumps({"settings": asked, "dataset": dataset_sha256, "prompts": prompts}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @classmethod
    def parse(
        cls,
        options: RawOptions,
        providers: ProviderRegistry,
        data_budgets: Callable[[str | None, str | None, int], tuple[int, ...]],
    ) -> RestoreSettings:
        """Parse and check every option, before any work; the one place settings are made.

        ``data_budgets(data, loader, embedded_questions)`` gives the budgets of
        the data when ``--restore-budgets`` names none (its loader's own), so
        the settings hold the budgets every process runs and are never replaced.
        """
        raw, where = dict(options.values), {n: options.source(n) for n in options.values}
        if raw["family-checks"] not in ("fail", "report"):
            raise SettingsError(f"{where['family-checks']}: {raw['family-checks']!r} is not fail or report")
        if raw["calibration"] not in ("auto", "on", "off"):
            raise SettingsError(f"{where['calibration']}: {raw['calibration']!r} is not auto, on or off")
        for role in MODEL_OPTIONS:
            if role == "writer-model" and raw[role] == "fake-malformed":  # the libraries' fake writer, every answer broken
                continue
            if raw[role] or role in ("reader", "judge", "scorer"):  # these three cannot be left empty
                try:
                    check_spec(raw[role], where[role], providers)
                except ModelSpecError as err:
                    raise SettingsError(str(err)) from None
        if raw["writer-model"] == "fake-strong":  # the fake writes as the offline writers do: there is one
            raise SettingsError(f"{where['writer-model']}: 'fake-strong' is a reader only; the fake writer is 'fake'")
        if raw["judge-format"] not in JUDGE_FORMATS:
            raise SettingsError(f"{where['judge-format']}: {raw['judge-format']!r} is not {', '.join(JUDGE_FORMATS)}")
        if raw["judge-format"] != "text":
            for role in ("judge", "audit-judge"):  # the judge audit re-grades with the same prompts
                problem = raw[role] and reply_problem(raw[role], raw["judge-format"], where["judge-format"], providers)
                if problem:
                    raise SettingsError(problem)
        if raw["robustness-reader"] and raw["robustness-reader"] == raw["reader"]:
            raise SettingsError(f"{where['robustness-reader']}: must differ from --restore-reader")
        if raw["granularity"] not in ("turn", "session"):
            raise SettingsError(f"{where['granularity']}: {raw['granularity']!r} is not turn or session")
        from pytest_restore.models.embeddings import embedder_of
        from pytest_restore.models.providers import check_embedder

        rankers = _parse_names(where["rankers"], raw["rankers"]) or ()
        where["ranker"] = where["rankers"] if len(rankers) == 1 else where["ranker"]  # the ranker, from --restore-rankers
        for name in rankers or (raw["ranker"],):
            embedder = embedder_of(name)
            if embedder is not None:
                try:
                    check_embedder(embedder, where["rankers" if rankers else "ranker"], providers)
                except ValueError as err:
                    raise SettingsError(str(err)) from None
        if raw["writer-embedder"]:
            try:
                check_embedder(raw["writer-embedder"], where["writer-embedder"], providers)
            except ValueError as err:
                raise SettingsError(str(err)) from None
        embed_limits = _parse_ints(where["embed-limits"], raw["embed-limits"], minimum=1) if raw["embed-limits"] else None
        if embed_limits is not None and len(embed_limits) != 2:
            raise SettingsError(f"{where['embed-limits']}: {raw['embed-limits']!r} is not INPUTS,TOKENS")
        questions = _parse_int(where["questions"], raw["questions"], minimum=1) if raw["questions"] else None
        budgets = _parse_ints(where["budgets"], raw["budgets"], minimum=1) if raw["budgets"] else ()  # (): the data's
        batch = options.batch
        _check_batch(batch, raw, where, providers)
        dataset = raw["dataset"] or None
        if dataset is not None and not raw["data"]:
            raise SettingsError(f"{where['dataset']}: names the loader of --restore-data, which is not given")
        data = raw["data"] or None
        if data is not None:  # a known dataset's name (--restore-data=locomo) is the file `data fetch` stored
            try:
                data = resolve_name(data, "--restore-data")
            except NotFetched as err:
                raise SettingsError(str(err)) from None
        prices = []
        for text in options.prices:
            try:
                model, (in_price, out_price) = parse_price(text, options.price_where)
            except ModelSpecError as err:
                raise SettingsError(str(err)) from None
            prices.append((model, in_price, out_price))
        fields: dict[str, Any] = {
            "prices": tuple(prices),
            "data": data,
            "report_dir": raw["report-dir"],
            "policies": _parse_names(where["policies"], raw["policies"]),
            "seeds": _parse_ints(where["seeds"], raw["seeds"]),
            "granularity": raw["granularity"],
            "questions": questions,
            "subset_seed": _parse_int(where["subset-seed"], raw["subset-seed"]),
            "reader": raw["reader"],
            "judge": raw["judge"],
            "scorer": raw["scorer"],
            "embedded_questions": _parse_int(where["embedded-questions"], raw["embedded-questions"], minimum=1),
            "bootstrap": _parse_int(where["bootstrap"], raw["bootstrap"], minimum=MIN_RESAMPLES),
            "bootstrap_seed": _parse_int(where["bootstrap-seed"], raw["bootstrap-seed"]),
            "equivalence_margin": _parse_float(where["equivalence-margin"], raw["equivalence-margin"]),
            "family_checks": raw["family-checks"],
            # the option alone: each provider reads its own variable (OPENAI_BASE_URL, ANTHROPIC_BASE_URL)
            # where its models are made, so one provider's server never receives another's models
            "base_url": raw["base-url"] or None,
            "cache": raw["cache"] or None,
            "max_concurrency": _parse_int(where["max-concurrency"], raw["max-concurrency"], minimum=1),
            "rpm": _parse_positive(where["rpm"], raw["rpm"]) if raw["rpm"] else None,
            "tpm": _parse_positive(where["tpm"], raw["tpm"]) if raw["tpm"] else None,
            "max_tries": _parse_int(where["max-tries"], raw["max-tries"], minimum=1),
            "timeout": _parse_positive(where["timeout"], raw["timeout"]),
            "max_retry_after": _parse_positive(where["max-retry-after"], raw["max-retry-after"]),
            "prompts": raw["prompts"] or None,
            "robustness_reader": raw["robustness-reader"] or None,
            "audit_judge": raw["audit-judge"] or None,
            "audit_judge_sample": _parse_int(where["audit-judge-sample"], raw["audit-judge-sample"], minimum=1),
            "calibration": raw["calibration"],
            "dry_run": options.dry_run,
            "ranker": rankers[0] if rankers else raw["ranker"] or "bm25-lite",
            "rankers": rankers if len(rankers) > 1 else (),
            "embed_limits": (embed_limits[0], embed_limits[1]) if embed_limits is not None else None,
            "ablations": options.ablations,
            "real_models": any(
                is_real(raw[role], providers)
                for role in ("reader", "judge", "scorer", "robustness-reader", "writer-model")
                if raw[role]
            ),
            "batch": batch,
            "batch_poll": _parse_positive(where["batch-poll"], raw["batch-poll"]),
            "batch_resubmit": _parse_int(where["batch-resubmit"], raw["batch-resubmit"]),
            "batch_export": raw["batch-export"] or None,
            "batch_round": raw["batch-round"] or None,
            "dataset": dataset,
            # naming the reader is not naming another writer: the run (and its id) is the default's
            "writer": raw["writer-model"] if raw["writer-model"] not in ("", raw["reader"]) else None,
            "judge_format": raw["judge-format"],
            "writer_embedder": raw["writer-embedder"] or None,
            "sources": where,
        }
        if not budgets:
            budgets = data_budgets(fields["data"], dataset, fields["embedded_questions"])
        return cls(**fields, budgets=tuple(sorted(budgets, reverse=True)))


#: The options that name a model (``fake`` or ``PROVIDER:MODEL``; the last three may be left empty).
MODEL_OPTIONS = ("reader", "judge", "scorer", "robustness-reader", "audit-judge", "writer-model")

#: The rounds a grid's calls fall into, in the order they depend on each other.
BATCH_ROUNDS = ("scorer", "writer", "reader", "judge")  # writer: the memory systems that write with a model


def _check_batch(batch: bool, raw: dict[str, str], where: dict[str, str], providers: ProviderRegistry) -> None:
    """The batch options make sense together (one line naming the option otherwise)."""
    if raw["batch-round"] and raw["batch-round"] not in BATCH_ROUNDS:
        raise SettingsError(f"{where['batch-round']}: {raw['batch-round']!r} is not {', '.join(BATCH_ROUNDS)}")
    if bool(raw["batch-export"]) != bool(raw["batch-round"]):
        raise SettingsError("--restore-batch-export and --restore-batch-round go together")
    if not batch:
        return
    real = [raw[role] for role in MODEL_OPTIONS if raw[role] and is_real(raw[role], providers)]
    if not real:
        raise SettingsError("--restore-batch: no model of the run is a real one (the fakes need no batch)")
    other = [spec for spec in real if not can(spec, "batch", providers)]
    if other:
        able = ", ".join(f"{name}:" for name in providers_with("batch", providers)) or "none"
        raise SettingsError(f"--restore-batch: {other[0]}'s provider has no batch support (providers with one: {able})")


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
    "rankers",
    "ablations",
    "writer",
    "judge_format",
)

