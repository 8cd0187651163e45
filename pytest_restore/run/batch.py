"""``--restore-batch``: the grid's calls as batch rounds, before the grid runs from the cache.

The grid's calls depend on each other in three steps: the importance
scorer's scores decide what ``llm-importance`` keeps, the stores decide the
readers' contexts, and the answers decide the judge's requests. So the
controller runs three rounds, each one batch per model of exactly the
requests the dry run counts (``run/calls.py``: ``grid_round``) minus what
the cache holds, each through its model's provider's batch interface
(``ModelProvider.batches``: OpenAI's Batch API, Anthropic's Message
Batches), and stores every checked answer in the response cache. The
grid then runs as usual and finds every call answered: its models are
cache-only (``models/batch.py``: ``BatchChatModel``), so nothing is sent live.
The calibration gate and the judge audit need no plan: their models send
each of their calls' misses as a round of their own.

A round with failed requests (an error line, an expired or cancelled batch)
keeps what came back and stops the run in one line, unless
``--restore-batch-resubmit`` sends the rest again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from pytest_restore.models.base import ChatRequest
from pytest_restore.models.batch import BatchError, BatchItem, BatchRunner, RoundOutcome
from pytest_restore.models.cache import CacheError, ResponseCache
from pytest_restore.models.providers import VALIDATORS, ProviderRegistry, resolve
from pytest_restore.run.calls import grid_round
from pytest_restore.run.parts import RunParts
from pytest_restore.run.quality import RunStopped
from pytest_restore.run.settings import BATCH_ROUNDS


class BatchRound(TypedDict):
    """One batch round of the grid: requests, what the cache held, the batches, answers, failures, tokens."""

    round: str
    requests: int
    cached: int
    created: list[str]
    attached: list[str]
    answered: int
    failed: dict[str, int]
    input_tokens: int
    output_tokens: int


def round_summary(name: str, requests: int, sent: int, outcome: RoundOutcome) -> BatchRound:
    """One round's summary: ``requests`` distinct, ``sent`` of them by batch (the rest were cached), what came back."""
    answered = [r for r in outcome.results.values() if r.ok]
    return BatchRound(
        round=name,
        requests=requests,
        cached=requests - sent,
        created=list(outcome.created),
        attached=list(outcome.attached),
        answered=len(answered),
        failed=dict(sorted(outcome.failures().items())),
        input_tokens=sum(r.input_tokens for r in answered),
        output_tokens=sum(r.output_tokens for r in answered),
    )


class Runners:
    """One batch runner per provider of the run's real models, made when its first round needs it."""

    def __init__(self, parts: RunParts) -> None:
        self.parts = parts
        self.providers: ProviderRegistry = parts.plan.registries.providers
        self.by_provider: dict[str, BatchRunner] = {}

    def items(self, planned: Sequence[tuple[str, str, ChatRequest]]) -> dict[str, list[BatchItem]]:
        """A round's real-model requests as batch items, by provider."""
        out: dict[str, list[BatchItem]] = {}
        for spec, role, request in planned:
            resolved = resolve(spec, self.providers)
            model = resolved[0].cache_name(resolved[1]) if resolved is not None else None
            if resolved is not None and model is not None:
                out.setdefault(resolved[0].name, []).append(BatchItem(role, model, request))
        return out

    def runner(self, provider: str) -> BatchRunner:
        """The provider's runner, through its batch interface (made once)."""
        if provider not in self.by_provider:
            s = self.parts.settings
            self.by_provider[provider] = BatchRunner(
                self.parts.plan.cache_dir, VALIDATORS, poll=s.batch_poll, resubmit=s.batch_resubmit,
                say=self.parts.say, client=self.providers[provider].batches(s.base_url),
            )
        return self.by_provider[provider]

    def close(self) -> None:
        """Release every runner's client."""
        for runner in self.by_provider.values():
            runner.close()


def run_grid_rounds(parts: RunParts, rounds: list[BatchRound] | None = None) -> str | None:
    """Run the scorer, writer, reader and judge rounds into the cache; ``None``, or why the run must stop (one line).

    ``rounds`` receives one summary per round run (requests, batches, answers, failures by cause, tokens);
    ``parts.say`` hears each round's progress. A round of several providers' models sends each provider
    its own batches.
    """
    say = parts.say
    runners = Runners(parts)
    cache = ResponseCache(parts.plan.cache_dir)
    try:
        for name in BATCH_ROUNDS:
            planned = grid_round(name, parts, cache)
            by_provider = runners.items(planned)
            todo = {p: runners.runner(p).uncached(items) for p, items in sorted(by_provider.items())}
            todo = {p: items for p, items in todo.items() if items}
            distinct = len({i.custom_id for items in by_provider.values() for i in items})
            sent = sum(len(items) for items in todo.values())
            if not sent:
                if distinct:
                    say(f"batch {name} round: all {distinct:,} requests are in the cache, nothing to submit")
                    if rounds is not None:
                        rounds.append(round_summary(name, distinct, 0, RoundOutcome()))
                continue
            say(f"batch {name} round: {sent:,} of {distinct:,} requests to answer by batch")
            outcome = RoundOutcome()
            for provider, items in todo.items():
                part = runners.runner(provider).run_round(name, items)
                outcome.results.update(part.results)
                outcome.created += part.created
                outcome.attached += part.attached
            failures = outcome.failures()
            summary = round_summary(name, distinct, sent, outcome)
            if rounds is not None:
                rounds.append(summary)
            if failures:
                failed = sum(failures.values())
                causes = "; ".join(f"{n} x {cause}" for cause, n in failures.most_common(3))
                return (
                    f"batch {name} round: {failed:,} of {sent:,} requests failed ({causes}); "
                    f"the {sent - failed:,} answers that came back are kept in the cache: run again to "
                    "submit the rest (or pass --restore-batch-resubmit N)"
                )
            say(
                f"batch {name} round: {summary['answered']:,} answers checked and cached ({summary['input_tokens']:,} "
                f"input and {summary['output_tokens']:,} output tokens, billed at batch prices)"
            )
    finally:
        runners.close()
    return None


def batch_rounds(parts: RunParts, rounds: list[BatchRound]) -> None:
    """The step before the grid: every grid call answered by batch, or :class:`RunStopped` (one line).

    ``rounds`` receives each round's summary (``run/checks.py``'s ``BatchRounds``).
    """
    try:
        reason = run_grid_rounds(parts, rounds)
    except (BatchError, CacheError) as err:  # the provider refused or is unreachable, a full disk: one line
        reason = f"--restore-batch: {err}"
    if reason is not None:
        raise RunStopped(reason)
