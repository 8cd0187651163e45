"""The run's model calls: what real models were asked, what failed and why, and what a grid would ask.

:class:`ModelCalls` sums the usage and failed calls every process reports
(xdist workers through their items' reports) with the models outside the
grid (the calibration's fresh judge, the audit judge); :func:`dry_run`
counts the calls a grid needs, and what is already cached, without making one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_restore.audit.run import Audit
from pytest_restore.data.dataset import Question
from pytest_restore.memory.eviction import Policy, PolicyRegistry
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.decoding import describe_decoding, estimate_tokens
from pytest_restore.models.fake import FakeScorer
from pytest_restore.models.prompts import READER_MAX_TOKENS, parse_score
from pytest_restore.models.providers import (
    CostLine,
    ProviderRegistry,
    cached_text,
    cost_line,
    render_cost,
)
from pytest_restore.plugin.settings import RestoreSettings
from pytest_restore.record import Record


class ModelCalls:
    """Real model calls summed over the run's processes: usage, failures by cause, concurrency reached."""

    def __init__(self) -> None:
        #: Each process's cumulative usage of each real model (the latest report of a process wins).
        self.usage_by_process: dict[str, dict[str, Any]] = {}
        #: Real-model call details per process (failure causes, concurrency reached, decoding).
        self.calls_by_process: dict[str, dict[str, Any]] = {}
        #: Failure causes of models outside the grid's (the calibration's fresh judge, the audit judge).
        self.side_calls: dict[str, dict[str, Any]] = {}

    def all_details(self) -> dict[str, dict[str, Any]]:
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
        for name, detail in sorted(self.all_details().items()):
            failures = detail.get("failures", {})
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
        lowered = sum(1 for r in records if str(r.get("excluded") or "").startswith("api_error"))
        lowered += sum(
            1
            for r in records
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


def dry_run(
    settings: RestoreSettings,
    audit_of: Callable[[str], Audit],
    policies: Sequence[Policy],
    registry: PolicyRegistry,
    providers: ProviderRegistry,
    cache_dir: Path,
    say: Callable[[str], None] | None = None,
) -> list[str]:
    """Unique calls per model, what is already cached, and token estimates; no call is made.

    ``audit_of`` gives the audit under a reader (built on first use), ``cache_dir``
    is the response cache the real models would read. ``say`` hears a progress
    line as each policy's requests are planned (seconds each on a large grid).
    """
    s = settings
    tell = say or (lambda _line: None)
    cache = ResponseCache(cache_dir) if s.uses_real_models else None
    primary = audit_of(s.reader)
    lines = []
    importance: dict[str, int] = {}
    scores_known = True
    if any(p.needs_importance for p in policies):
        scorer_requests = primary.scorer_requests()
        lines.append(cost_line("scorer", s.scorer, list(scorer_requests.values()), cache, providers=providers))
        for content, request in scorer_requests.items():
            if s.scorer == "fake":
                text: str | None = str(FakeScorer.score(content))
            else:
                text = cached_text(cache, s.scorer, request, providers)
            score = parse_score(text) if text is not None else None
            if score is None:
                scores_known = False
                break
            importance[content] = score
    judge_requests: list[ChatRequest] = []
    unknown_answers = 0
    for reader in s.readers:
        audit = audit_of(reader)
        planned: list[tuple[Question, ChatRequest]] = []
        note = ""
        tell(f"dry run: planning the reader requests of {len(policies) * len(s.budgets)} cells under {reader} (no model is called) ...")
        for done, policy in enumerate(policies, 1):
            for budget in s.budgets:
                if policy.needs_importance and not scores_known:
                    note = "llm-importance cells counted after scoring: upper bound"
                    planned += audit.planned_reader_requests(registry["fifo"], budget, {})
                    continue
                planned += audit.planned_reader_requests(policy, budget, importance)
            tell(f"dry run: {policy.name} planned ({done}/{len(policies)} policies, {len(planned):,} requests so far)")
        lines.append(cost_line("reader", reader, [request for _, request in planned], cache, note, providers))
        # identical requests are sent once (and hold the same question)
        for request, question in {r: q for q, r in planned}.items():
            answer = cached_text(cache, reader, request, providers)
            if answer is None:
                unknown_answers += 1
                continue
            judge_requests.append(
                audit.prompts.judge(question=question.question, answer=question.answer, prediction=answer)
            )
    judge = cost_line("judge", s.judge, judge_requests, cache, providers=providers)
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


def calls_markdown(details: dict[str, dict[str, Any]]) -> str:
    """report.md's real-model section: what was sent, the concurrency reached, failures by cause."""
    out = ["## Real model calls", "", "| model | decoding sent | concurrency reached | failed calls |", "|---|---|---:|---|"]
    for name, d in sorted(details.items()):
        decoding = ", ".join(f"{k}: {v}" for k, v in d.get("decoding", {}).items())
        failures = "; ".join(f"{n} x {cause}" for cause, n in sorted(d.get("failures", {}).items())) or "none"
        out.append(f"| {name} | {decoding} | {d.get('concurrency', 0)} | {failures.replace('|', '/')} |")
    return "\n".join(out)


def call_detail(model: object) -> dict[str, Any]:
    """A real model's failed calls by cause, the concurrency it reached and what it was sent."""
    causes = getattr(model, "failure_causes", {})
    name = str(getattr(model, "model", ""))
    return {
        "failures": dict(sorted(causes.items())),
        "concurrency": int(getattr(model, "concurrency_peak", 0)),
        "decoding": describe_decoding(name) if name else {},
    }


def failed_count(detail: dict[str, Any]) -> int:
    """How many calls of one model failed, whatever the cause."""
    return sum(int(n) for n in detail.get("failures", {}).values())
