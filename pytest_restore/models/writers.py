"""The derived memory systems written by a model: ``session-summary-model`` and ``fact-extract-model``.

They are :mod:`pytest_restore.memory.derived`'s ``session-summary`` and
``fact-extract`` with their writer replaced: a closed session's summary, or a
turn's facts, come from the run's reader model, asked with the prompts of
:mod:`pytest_restore.models.prompts`. A writer lists its requests
(``Summarizer.request``, ``Extractor.request``) and keeps the replies it is
given (``supply``); the audit asks every history's requests at once through
the model layer before it feeds the system (``Audit.write``), so they are
cached, retried, batched and priced as any other call, and the dry run counts
them. They live here, at the models' stage, because they build model requests.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

from pytest_restore.data.units import Unit
from pytest_restore.memory.derived import (
    BUILTIN_SYSTEMS,
    Extractor,
    FactExtract,
    SessionSummary,
    Summarizer,
)
from pytest_restore.memory.eviction import BUILTIN_POLICIES, Policy, PolicyRegistry
from pytest_restore.memory.memories import Memory
from pytest_restore.memory.systems import ReplyHooks
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.prompts import facts_request, parse_facts, summary_request


class ModelWriter(ReplyHooks):
    """A writer whose texts come from a model: the replies to its requests, supplied by the audit before use."""

    def __init__(self) -> None:
        self.replies: dict[Hashable, str] = {}

    def supply(self, replies: Mapping[Hashable, str]) -> None:
        """Keep the model's replies, by request."""
        self.replies.update(replies)

    def unusable(self, request: Hashable, reply: str) -> str | None:
        """An empty (or blank) reply writes nothing: a summary of nothing, facts that say not even ``NONE``."""
        return None if reply.strip() else "empty reply"

    def reply(self, request: ChatRequest, what: str) -> str:
        """The model's reply to ``request``; a missing one is an error naming ``what`` (the audit supplies all)."""
        text = self.replies.get(request)
        if text is None:
            raise LookupError(f"no model reply for {what}: the audit asks every request before it feeds the system")
        return text


class ModelSummary(ModelWriter, Summarizer):
    """A closed session's summary written by a model (``models.prompts.summary_request``), citing every turn."""

    def request(self, turns: Sequence[Unit]) -> ChatRequest:
        """The summary request of one session's turns."""
        return summary_request(turns[-1].date, [(t.role, t.content) for t in turns])

    def summarize(self, turns: Sequence[Unit]) -> list[Memory]:
        text = self.reply(self.request(turns), f"the summary of session {turns[-1].session}").strip()
        return [Memory(text, turns[-1].date, tuple(t.position for t in turns))] if text else []


class ModelFacts(ModelWriter, Extractor):
    """A turn's facts written by a model (``models.prompts.facts_request``), one per line of its reply."""

    def request(self, unit: Unit) -> ChatRequest:
        """The facts request of one turn."""
        return facts_request(unit.date, unit.role, unit.content)

    def extract(self, unit: Unit) -> list[str]:
        return parse_facts(self.reply(self.request(unit), f"the facts of unit {unit.position}"))


class SessionSummaryModel(SessionSummary):
    """``session-summary-model``: ``session-summary`` with each session summarised by the run's model."""

    name = "session-summary-model"

    def __init__(self, summarizer: Summarizer | None = None) -> None:
        super().__init__(summarizer or ModelSummary())


class FactExtractModel(FactExtract):
    """``fact-extract-model``: ``fact-extract`` with each turn's facts written by the run's model."""

    name = "fact-extract-model"

    def __init__(self, extractor: Extractor | None = None, restate: float = 0.5) -> None:
        super().__init__(extractor or ModelFacts(), restate)


#: The built-in systems that write with the run's model (after the offline ones in every registry).
MODEL_SYSTEMS: tuple[type[Policy], ...] = (SessionSummaryModel, FactExtractModel)


def offline_variant(policy: Policy) -> Policy:
    """The offline counterpart of a system that writes with a model (a dry run's estimate before its replies)."""
    if isinstance(policy, SessionSummaryModel):
        return SessionSummary()
    if isinstance(policy, FactExtractModel):
        return FactExtract(restate=policy.restate)
    return policy


def default_policies() -> PolicyRegistry:
    """Every built-in policy and memory system (offline and model-written), plus installed packages' entry points."""
    return PolicyRegistry.default((*BUILTIN_POLICIES, *BUILTIN_SYSTEMS, *MODEL_SYSTEMS))
