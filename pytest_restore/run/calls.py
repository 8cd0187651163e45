"""The run's model calls: what real models were asked, what failed and why, and what a grid would ask.

:class:`ModelCalls` sums the usage and failed calls every process reports
(xdist workers through their items' reports) with the models outside the
grid (the calibration's fresh judge, the audit judge); :func:`dry_run`
counts the calls a grid needs, and what is already cached, without making one.
The dry run and the grid's rounds are functions over the run's parts
(:class:`~pytest_restore.run.parts.RunParts`: the plan's settings, policies
and registries, the audits under each reader, the response cache).
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path

from pytest_restore.audit.memo import UsageJSON
from pytest_restore.data.dataset import Question
from pytest_restore.data.tokens import count_tokens
from pytest_restore.libraries.registry import CALL_ESTIMATES, library_of
from pytest_restore.memory.eviction import Policy
from pytest_restore.memory.systems import MemorySystem
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.batch import BatchItem, Ledger, LedgerEntry, LedgerError, input_file
from pytest_restore.models.batch_ledger import FIRST_PROVIDER
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.decoding import estimate_tokens
from pytest_restore.models.fake import FakeScorer, write
from pytest_restore.models.prompts import READER_MAX_TOKENS, VERDICT_SCHEMA, parse_score
from pytest_restore.models.providers import (
    CostLine,
    ModelProvider,
    ProviderRegistry,
    cache_name,
    cached_text,
    cost_line,
    is_real,
    render_cost,
    resolve,
)
from pytest_restore.models.writers import offline_variant
from pytest_restore.record import Record
from pytest_restore.report.checks import replicas_set_aside
from pytest_restore.run.parts import CallDetail, RunParts


class ModelCalls:
    """Real model calls summed over the run's processes: usage, failures by cause, concurrency reached."""

    def __init__(self) -> None:
        #: Each process's cumulative usage of each real model (the latest report of a process wins).
        self.usage_by_process: dict[str, dict[str, UsageJSON]] = {}
        #: Real-model call details per process (failure causes, concurrency reached, decoding).
        self.calls_by_process: dict[str, dict[str, CallDetail]] = {}
        #: Failure causes of models outside the grid's (the calibration's fresh judge, the audit judge).
        self.side_calls: dict[str, CallDetail] = {}

    def all_details(self) -> dict[str, CallDetail]:
        """Call details summed over processes, plus the models outside the grid."""
        total: dict[str, CallDetail] = {}
        for details in self.calls_by_process.values():
            for name, d in details.items():
                t = total.setdefault(name, {"failures": {}, "concurrency": 0, "decoding": d["decoding"]})
                for cause, n in d["failures"].items():
                    t["failures"][cause] = t["failures"].get(cause, 0) + int(n)
                t["concurrency"] = max(t["concurrency"], int(d["concurrency"]))
                for where, why in d.get("set_aside", {}).items():  # each process sets a bad replica aside itself
                    aside = t.setdefault("set_aside", {})
                    aside[where] = min(why, aside.get(where, why))  # one why, whichever process arrived first
        total.update(self.side_calls)
        return total

    def set_aside(self) -> dict[str, str]:
        """Every replica set aside by any model in any process, by address: why, and by which models."""
        return replicas_set_aside(self.all_details())

    def summarise_failures(self, by_process: dict[str, dict[str, CallDetail]] | None = None) -> list[str]:
        """One line per model whose calls failed: how many and why, grouped by cause."""
        if by_process is not None:
            self.calls_by_process.update(by_process)
        lines = []
        for name, detail in sorted(self.all_details().items()):
            failures = detail["failures"]
            if not failures:
                continue
            causes = "; ".join(f"{n} x {cause}" for cause, n in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0])))
            lines.append(f"{name}: {sum(failures.values())} calls failed: {causes}")
        return lines

    def failed_run_reason(self, records: Sequence[Record]) -> str | None:
        """Why the run does not pass because of model calls, or ``None``.

        A record excluded by a failed call lowered a cell's N; a model that was
        asked and answered nothing at all leaves nothing to audit.
        """
        lowered = sum(1 for r in records if (r.excluded or "").startswith("api_error"))
        lowered += sum(
            1
            for r in records
            if r.ablations is not None and any(v.startswith("api_error") for v in r.ablations.excluded.values())
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

    def total_usage(self) -> dict[str, UsageJSON]:
        """Real model usage summed over processes (sent calls, cache hits, failures, tokens)."""
        total: dict[str, UsageJSON] = {}
        for models in self.usage_by_process.values():
            for name, u in sorted(models.items()):
                t = total.setdefault(name, {"sent": 0, "cached": 0, "failed": 0, "input_tokens": 0, "output_tokens": 0, "served": []})
                t["sent"] += int(u["sent"])
                t["cached"] += int(u["cached"])
                t["failed"] += int(u["failed"])
                t["input_tokens"] += int(u["input_tokens"])
                t["output_tokens"] += int(u["output_tokens"])
                t["served"] = sorted(set(t["served"]) | set(u["served"]))
        return total


#: One planned call: the model's name as configured, its role, the request.
Planned = tuple[str, str, ChatRequest]


class RoundNotReady(Exception):
    """A round whose requests depend on answers the cache does not hold yet (said in one line)."""


def scorer_round(parts: RunParts) -> list[ChatRequest]:
    """The importance scorer's requests, when a policy of the grid needs importance (else none)."""
    if not any(p.needs_importance for p in parts.plan.policies):
        return []
    return list(parts.audit().scorer_requests().values())


def known_importance(parts: RunParts, cache: ResponseCache | None) -> dict[str, int] | None:
    """Every unit's importance score, from the fake scorer or the cache; ``None`` while one is unknown."""
    importance: dict[str, int] = {}
    if not any(p.needs_importance for p in parts.plan.policies):
        return importance
    scorer = parts.settings.scorer
    for content, request in parts.audit().scorer_requests().items():
        if scorer == "fake":
            text: str | None = str(FakeScorer.score(content))
        else:
            text = cached_text(cache, scorer, request, parts.plan.registries.providers)
        score = parse_score(text) if text is not None else None
        if score is None:
            return None
        importance[content] = score
    return importance


def writer_round(parts: RunParts) -> list[ChatRequest]:
    """The requests of the memory systems that write with the run's model (``session-summary-model``, ...)."""
    primary = parts.audit()
    return list(dict.fromkeys(r for p in parts.plan.policies for r in primary.writer_requests(p)))


def known_writes(parts: RunParts, policy: Policy, cache: ResponseCache | None) -> dict[Hashable, str] | None:
    """Every reply ``policy``'s writer needs, from the fake model or the cache; ``None`` while one is unknown."""
    replies: dict[Hashable, str] = {}
    writer = parts.settings.writer_model
    for request in parts.audit().writer_requests(policy):
        text = write(request) if writer == "fake" else cached_text(cache, writer, request, parts.plan.registries.providers)
        if text is None:
            return None
        replies[request] = text
    return replies


def reader_round(
    parts: RunParts,
    importance: dict[str, int] | None,
    tell: Callable[[str], None] = lambda _line: None,
    writes: Callable[[Policy], dict[Hashable, str] | None] = lambda _policy: {},
    *,
    stand_in: bool = False,
) -> dict[str, list[tuple[Question, ChatRequest]]]:
    """Each reader's requests over the grid, each with its question; ``importance=None`` counts the
    scored cells as ``fifo`` would (an upper bound before scoring), and a memory system whose writer's
    replies ``writes`` does not know yet is counted as its offline variant (an estimate). ``stand_in``
    (the dry run): a memory library's cells are counted as ``fact-extract``'s, since building the
    library's store would call its model. ``tell`` hears a line per policy."""
    settings, policies, fifo = parts.settings, parts.plan.policies, parts.plan.registries.policies["fifo"]
    plans: dict[str, list[tuple[Question, ChatRequest]]] = {}
    for reader in settings.readers:
        audit = parts.audit(reader)
        planned: list[tuple[Question, ChatRequest]] = []
        tell(f"dry run: planning the reader requests of {len(policies) * len(settings.budgets)} cells under {reader} (no model is called) ...")
        for done, policy in enumerate(policies, 1):
            for budget in settings.budgets:
                replies = writes(policy) if audit.writer_requests(policy) else {}
                if policy.needs_importance and importance is None:
                    planned += audit.planned_reader_requests(fifo, budget, {})
                elif stand_in and library_of(policy) is not None:
                    planned += audit.planned_reader_requests(parts.plan.registries.policies[LIBRARY_STAND_IN], budget, {})
                elif replies is None:
                    planned += audit.planned_reader_requests(offline_variant(policy), budget, {})
                elif replies and isinstance(policy, MemorySystem):
                    policy.supply(replies)
                    planned += audit.planned_reader_requests(policy, budget, importance or {})
                else:
                    planned += audit.planned_reader_requests(policy, budget, importance or {})
            tell(f"dry run: {policy.name} planned ({done}/{len(policies)} policies, {len(planned):,} requests so far)")
        plans[reader] = planned
    return plans


def judge_round(
    parts: RunParts, plans: dict[str, list[tuple[Question, ChatRequest]]], cache: ResponseCache | None
) -> tuple[list[ChatRequest], int]:
    """The judge's requests for every reader answer the cache holds, and how many answers it lacks."""
    providers = parts.plan.registries.providers
    judge_requests: list[ChatRequest] = []
    unknown_answers = 0
    for reader, planned in plans.items():
        audit = parts.audit(reader)
        # identical requests are sent once (and hold the same question)
        for request, question in {r: q for q, r in planned}.items():
            answer = cached_text(cache, reader, request, providers)
            if answer is None:
                unknown_answers += 1
                continue
            judge_requests.append(
                audit.prompts.judge(question=question.question, answer=question.answer, prediction=answer)
            )
    return judge_requests, unknown_answers


def grid_round(name: str, parts: RunParts, cache: ResponseCache) -> list[Planned]:
    """Every call of one round of the grid (``scorer``, ``reader`` or ``judge``), for its real models.

    A round needs the answers of the rounds before it in the cache
    (:class:`RoundNotReady` otherwise): the readers' contexts depend on the
    scores, the judge's requests on the answers.
    """
    s, policies, providers = parts.settings, parts.plan.policies, parts.plan.registries.providers
    if name == "scorer":
        return [(s.scorer, "scorer", r) for r in scorer_round(parts)] if is_real(s.scorer, providers) else []
    if name == "writer":  # the memory systems' writer: --restore-writer-model, else the run's reader
        writer = s.writer_model
        return [(writer, "writer", r) for r in writer_round(parts)] if is_real(writer, providers) else []
    importance = known_importance(parts, cache)
    if importance is None:
        raise RoundNotReady("the reader round needs every importance score: the scorer round is not in the cache yet")
    writes = {p.name: known_writes(parts, p, cache) for p in policies}
    unwritten = [name for name, replies in writes.items() if replies is None]
    if unwritten:
        raise RoundNotReady(f"the reader round needs what {', '.join(unwritten)} wrote: the writer round is not in the cache yet")
    plans = reader_round(parts, importance, writes=lambda p: writes[p.name])
    if name == "reader":
        return [(reader, "reader", r) for reader, planned in plans.items() if is_real(reader, providers) for _, r in planned]
    requests, unknown = judge_round(parts, plans, cache)
    if unknown:
        raise RoundNotReady(f"the judge round needs every reader answer: {unknown:,} are not in the cache yet")
    return [(s.judge, "judge", r) for r in requests] if is_real(s.judge, providers) else []


def batch_round_count(parts: RunParts, writes: bool = False) -> list[str]:
    """The rounds a ``--restore-batch`` run needs, by name, in order (``writes``: a memory system of the grid
    writes with a model)."""
    s, policies, providers = parts.settings, parts.plan.policies, parts.plan.registries.providers
    rounds = []
    if s.calibration == "on" or (s.calibration == "auto" and s.uses_real_models):
        # the gate's oracle (reader, judge), its cell (reader, judge), each judge repeat alone, the judge
        # probes; a fake model answers at once, so only the real ones' steps are rounds
        reader, judge = is_real(s.reader, providers), is_real(s.judge, providers)
        steps = [("calibration oracle reader", reader), ("calibration oracle judge", judge),
                 ("calibration cell reader", reader), ("calibration cell judge", judge),
                 ("calibration judge repeat 1", judge), ("calibration judge repeat 2", judge),
                 ("calibration judge probes", judge)]
        rounds += [name for name, real in steps if real]
    if any(p.needs_importance for p in policies) and is_real(s.scorer, providers):
        rounds.append("scorer")
    if writes and is_real(s.writer_model, providers):
        rounds.append("writer")
    if any(is_real(r, providers) for r in s.readers):
        rounds.append("reader")
    if is_real(s.judge, providers):
        rounds.append("judge")
    if s.audit_judge and is_real(s.audit_judge, providers):
        rounds.append("judge audit")
    return rounds


#: What a memory library's cells are read as in a dry run (its own store would call its model): the offline system
#: closest to one, a memory per fact of each turn.
LIBRARY_STAND_IN = "fact-extract"


def library_lines(parts: RunParts) -> tuple[list[CostLine], list[str]]:
    """The dry run's estimate of each memory library's own chat calls (through the run's gateway, to the writer
    model): its measured chat calls per turn and tokens per call (``libraries.registry.CALL_ESTIMATES``) times the
    turns its stores will be fed (every audited history, at every budget and seed), beside it its embeddings
    requests and their tokens at the embedder's price where the embedder is real; and a line for each library
    whose tokens were never measured (its calls are not in the estimate). No library runs in a dry run, so what
    the cache already holds of its calls is not known: none is counted cached."""
    s, audit = parts.settings, parts.audit()
    histories = {p.question.history_key: len(p.history.units) for p in audit.questions}
    lines, unmeasured = [], []
    for policy in parts.plan.policies:
        library = library_of(policy)
        if library is None:
            continue
        turns = sum(histories.values()) * len(s.budgets) * (len(audit.config.seeds) if policy.seeded else 1)
        known = CALL_ESTIMATES.get(library.name)
        if known is None or known.tokens is None:
            per_turn = f"~{known.chat_per_turn:g} chat calls a turn ({known.source}) x " if known is not None else ""
            unmeasured.append(
                f"library {library.name}: {per_turn}{turns:,} turns to the writer {s.writer_model}; its tokens per call "
                "were never measured (libraries/registry.py), so its calls are not in the estimate above"
            )
        else:
            calls = round(known.chat_per_turn * turns)
            lines.append(CostLine(
                "library", s.writer_model, calls, 0, calls * known.tokens[0], calls * known.tokens[1],
                f"{library.name}: estimate, {known.chat_per_turn:.2f} chat calls a turn x {turns:,} turns at "
                f"{known.tokens[0]:,} in and {known.tokens[1]:,} out per call ({known.source}; libraries/registry.py)",
            ))
        embedder = s.writer_embedder or "fake"
        if embedder != "fake" and known is not None and known.embeddings is not None:  # the fake embedder is free
            per_request, tokens = known.embeddings
            requests = round(per_request * turns)
            lines.append(CostLine(
                "library", embedder, requests, 0, requests * tokens, 0,
                f"{library.name}: estimate, {per_request:.2f} embeddings requests a turn x {turns:,} turns at "
                f"{tokens:,} tokens each ({known.source}; libraries/registry.py)",
            ))
    return lines, unmeasured


def dry_run(parts: RunParts) -> list[str]:
    """Unique calls per model, what is already cached, and token estimates; no call is made.

    The audits are the parts' (each built on first use), the cache the one
    the real models would read (:attr:`Plan.cache_dir`); ``parts.say``
    hears a progress line as each policy's requests are planned (seconds each
    on a large grid). With ``--restore-batch`` the estimate is at batch prices
    and says how many rounds the run needs (:func:`export_batch_round` writes
    a round's input file).
    """
    s, policies, providers = parts.settings, parts.plan.policies, parts.plan.registries.providers
    cache_dir = parts.plan.cache_dir
    cache = ResponseCache(cache_dir) if s.uses_real_models else None
    primary = parts.audit()
    lines = []
    scorer_requests = scorer_round(parts)
    if scorer_requests:
        lines.append(cost_line("scorer", s.scorer, scorer_requests, cache, providers=providers))
    writer_requests = writer_round(parts)
    if writer_requests:  # the memory systems' writer: --restore-writer-model, else the run's reader
        lines.append(cost_line("writer", s.writer_model, writer_requests, cache, providers=providers))
    guests, unmeasured = library_lines(parts)
    lines += guests
    importance = known_importance(parts, cache)
    plans = reader_round(parts, importance, parts.say, lambda p: known_writes(parts, p, cache), stand_in=True)
    note = "llm-importance cells counted after scoring: upper bound" if importance is None else ""
    unwritten = [p.name for p in policies if primary.writer_requests(p) and known_writes(parts, p, cache) is None]
    libraries = [p.name for p in policies if library_of(p) is not None]
    for reader, planned in plans.items():
        reader_note = note if any(p.needs_importance for p in policies) else ""
        if unwritten:  # their contexts depend on what the writer will write
            reader_note = "; ".join(x for x in (reader_note, f"{', '.join(unwritten)} counted as written offline: estimate") if x)
        if libraries:
            said = f"{', '.join(libraries)} counted as {LIBRARY_STAND_IN}'s stores: estimate"
            reader_note = "; ".join(x for x in (reader_note, said) if x)
        lines.append(cost_line("reader", reader, [request for _, request in planned], cache, reader_note, providers))
    judge_requests, unknown_answers = judge_round(parts, plans, cache)
    judge = cost_line("judge", s.judge, judge_requests, cache, providers=providers)
    if unknown_answers:
        empty = primary.prompts.judge(question="", answer="", prediction="")
        tokens_in, tokens_out = estimate_tokens([empty], s.judge.partition(":")[2] or s.judge)
        judge = CostLine(
            "judge",
            s.judge,
            judge.calls + unknown_answers,
            judge.cached,
            judge.input_tokens + unknown_answers * (tokens_in + READER_MAX_TOKENS),
            judge.output_tokens + unknown_answers * tokens_out,
            f"{unknown_answers:,} answers not yet known: upper bound",
        )
    if s.judge_format == "json-schema" and judge.calls:
        # OpenAI bills its own rendering of the schema in the prompt, which cannot be counted here (docs/MODELS.md)
        schema = f"its schema in each prompt not counted ({count_tokens([VERDICT_SCHEMA])[0]} tokens as JSON): estimate"
        judge = dataclasses.replace(judge, note="; ".join(x for x in (judge.note, schema) if x))
    lines.append(judge)
    prices = {model: (i, o) for model, i, o in s.prices}
    out = render_cost(lines, prices, batch=s.batch, providers=providers) + unmeasured
    if s.batch:
        rounds = batch_round_count(parts, bool(writer_requests))
        out.append(f"batch rounds: {len(rounds)} ({', '.join(rounds)}), each within the API's 24 h window")
        try:
            entries = [e for e in Ledger(cache_dir).entries() if e.kind == "batch"]
        except LedgerError as err:  # the run itself stops on it before submitting anything
            entries = []
            out.append(f"batch: {err}")
        running = [e for e in entries if e.state == "pending"]
        cut = [e for e in entries if e.state == "submitting"]
        if cut:
            out.append(
                f"batch: {len(cut)} creates of this cache were cut short and may have made batches "
                f"({sum(e.requests for e in cut):,} requests): the run looks for them before it submits anything"
            )
        if running:
            out.append(
                f"batch: {len(running)} batches of this cache are still running ({sum(e.requests for e in running):,} "
                "requests, not paid again: the run attaches to them; `python -m pytest_restore batch status`)"
            )
    return out


def export_batch_round(parts: RunParts) -> tuple[list[str], list[Path]]:
    """``--restore-batch-export``: the round ``--restore-batch-round`` names, written as batch input
    files (:func:`export_round`); the lines said, and the files written."""
    s, cache_dir = parts.settings, parts.plan.cache_dir
    assert s.batch_export and s.batch_round
    try:
        planned = grid_round(s.batch_round, parts, ResponseCache(cache_dir))
    except RoundNotReady as err:
        return [f"batch export: nothing written: {err}"], []
    return export_round(s.batch_round, planned, Path(s.batch_export), cache_dir, parts.plan.registries.providers)


def export_round(
    name: str, planned: Sequence[Planned], path: Path, cache_dir: Path, providers: ProviderRegistry
) -> tuple[list[str], list[Path]]:
    """Write the round's uncached requests as a batch input file, recorded in the cache's ledger for
    ``batch import``; one file per model (the Batch API takes one model per file), in its provider's batch
    input format (``BatchAPI.input_file``: OpenAI's, which vLLM's ``run_batch`` reads too; Anthropic's
    requests). Lines said, files written."""
    by_model: dict[str, list[BatchItem]] = {}
    provider_of: dict[str, ModelProvider] = {}
    for spec, role, request in planned:
        name_of = cache_name(spec, providers)
        resolved = resolve(spec, providers)
        if name_of is None or resolved is None:
            continue
        by_model.setdefault(name_of, []).append(BatchItem(role, name_of, request))
        provider_of[name_of] = resolved[0]
    runner_cache = ResponseCache(cache_dir)
    ledger = Ledger(cache_dir)
    lines: list[str] = []
    written: list[Path] = []
    if not by_model:
        return [f"batch export: the {name} round has no real model's call"], written
    for model, items in sorted(by_model.items()):
        distinct = list({i.custom_id: i for i in items}.values())
        todo = [i for i in distinct if runner_cache.peek(request_key(i.model, i.request)) is None]
        target = path if len(by_model) == 1 else path.with_name(f"{path.stem}.{model}{path.suffix}")
        target.parent.mkdir(parents=True, exist_ok=True)
        provider = provider_of[model]
        target.write_bytes(provider.batches(None).input_file(todo) if "batch" in provider.capabilities else input_file(todo))
        written.append(target)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()[:16]
        entry = LedgerEntry(
            name=f"export-{digest}", kind="export", round=name, model=model, state="exported",
            created=time.time(), requests=len(todo), input_path=str(target.resolve()),
            provider=provider.name if "batch" in provider.capabilities else FIRST_PROVIDER,
        )
        ledger.save(entry, todo)
        lines.append(
            f"batch export: {len(todo):,} {model} requests of the {name} round -> {target} "
            f"({len(distinct) - len(todo):,} already cached, left out)"
        )
    return lines, written


def failed_count(detail: CallDetail) -> int:
    """How many calls of one model failed, whatever the cause."""
    return sum(int(n) for n in detail["failures"].values())
