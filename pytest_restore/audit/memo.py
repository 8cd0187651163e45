"""The audit's model calls: each distinct request sent once per process, and what that saved.

The audit wraps its reader, judge and scorer in a :class:`MemoModel`, which
sends a request only if this process has not had it answered before and
counts each model's :class:`Usage`. Records carry each condition's
:func:`prompt_id`, so :func:`model_calls` can count from the records alone
how many distinct reader and judge calls a grid needed against one call per
condition of every record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from pytest_restore.models.base import ChatModel, ChatRequest, ChatResult
from pytest_restore.record import Record


def request_digest(request: ChatRequest) -> bytes:
    """The sha256 of everything in a request (what can change the model's output)."""
    digest = hashlib.sha256(f"{request.max_tokens}\x1f{request.temperature!r}".encode())
    for role, content in request.messages:
        digest.update(b"\x1e" + role.encode() + b"\x1f" + content.encode("utf-8", "surrogatepass"))
    return digest.digest()


def prompt_id(request: ChatRequest) -> str:
    """A short name of a request: the first 16 hex digits of :func:`request_digest`.

    Records carry it for each condition, so a report can count the distinct
    reader calls a grid needed against one call per condition of every record.
    """
    return prompt_id_of(request_digest(request))


def prompt_id_of(digest: bytes) -> str:
    """:func:`prompt_id` from the request's :func:`request_digest`, where the digest is made anyway."""
    return digest.hex()[:16]


@dataclass(frozen=True)
class ReaderCalls:
    """One reader's calls of the main conditions, unique against naive (:func:`model_calls`).

    Naive: one call per condition of every record (oracle, policy, restored),
    as if nothing were shared; unique: distinct requests. ``report.md``'s model
    calls table and ``summary.json``'s ``model_calls`` read this one object.
    """

    reader_naive: int
    reader_unique: int
    judge_naive: int
    judge_unique: int

    @property
    def reader_ratio(self) -> float | None:
        """Unique over naive reader calls (``None``: no call)."""
        return self.reader_unique / self.reader_naive if self.reader_naive else None

    @property
    def judge_ratio(self) -> float | None:
        """Unique over naive judge calls (``None``: no call)."""
        return self.judge_unique / self.judge_naive if self.judge_naive else None

    def to_json(self) -> dict[str, Any]:
        """Plain values, the ratios beside the counts."""
        return {
            "reader_naive": self.reader_naive,
            "reader_unique": self.reader_unique,
            "reader_ratio": self.reader_ratio,
            "judge_naive": self.judge_naive,
            "judge_unique": self.judge_unique,
            "judge_ratio": self.judge_ratio,
        }


def model_calls(records: Iterable[Record]) -> dict[str, ReaderCalls]:
    """Reader and judge calls of the main conditions per reader, unique against naive, from the records alone.

    Unique: distinct reader requests (the records' condition prompt ids) and
    distinct judge requests (question, reference and answer). Records without
    prompt ids (older ones) are left out.
    """
    out: dict[str, ReaderCalls] = {}
    for reader in sorted({r.reader for r in records if r.conditions.oracle.prompt is not None}):
        prompts: set[str] = set()
        graded: set[tuple[str, str, str]] = set()
        naive = judged = 0
        for r in records:
            if r.reader != reader or r.conditions.oracle.prompt is None:
                continue
            for _name, condition in r.conditions.by_name():
                if condition.prompt is None:
                    continue
                naive += 1
                prompts.add(condition.prompt)
                if condition.answer is not None:
                    judged += 1
                    graded.add((str(r.question), str(r.reference), condition.answer))
        out[reader] = ReaderCalls(
            reader_naive=naive, reader_unique=len(prompts), judge_naive=judged, judge_unique=len(graded)
        )
    return out


class UsageJSON(TypedDict):
    """One model's :class:`Usage` as plain values (a grid item's message, ``run.settings.model_usage``)."""

    sent: int
    cached: int
    failed: int
    input_tokens: int
    output_tokens: int
    #: the base URLs (replicas) that answered
    served: list[str]


@dataclass
class Usage:
    """What one model cost this process: calls sent, cache hits, failures and tokens."""

    sent: int = 0
    cached: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    served: set[str] = field(default_factory=set)

    def to_json(self) -> UsageJSON:
        """Plain values, for a report property."""
        return {
            "sent": self.sent,
            "cached": self.cached,
            "failed": self.failed,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "served": sorted(self.served),
        }


class MemoModel:
    """Sends each distinct request once per process; its outcome, success or failure, is remembered.

    A request that failed after its retries is failed for every condition that
    asks for it later, exactly as a success is shared: retrying it for each
    would pay for the same failure again and could give one prompt two
    outcomes in one run (failed for one cell, answered for another). The next
    run tries it again.
    """

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        # Keyed by the request's sha256 (or the caller's key), not the request: reader prompts are long,
        # and keeping every one alive would hold every rendered context in memory.
        self._memo: dict[Hashable, ChatResult] = {}
        self.usage = Usage()

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.model.name

    def run(self, requests: Sequence[ChatRequest], keys: Sequence[Hashable] | None = None) -> list[ChatResult]:
        """Results for ``requests``; only requests never sent before are sent.

        ``keys``: each request's name where the caller has one already, in place of its digest: the
        digest it made of the request (a record's :func:`prompt_id`), or what the request was filled
        with when that decides the whole request (an importance request's unit content, under the
        audit's one prompt set). A key names one request only; the other callers' are digests (bytes),
        so a text key never meets one.
        """
        if keys is None:
            keys = [request_digest(r) for r in requests]
        missing = {k: r for k, r in zip(keys, requests) if k not in self._memo}
        if missing:
            for key, result in zip(missing, self.model.run(list(missing.values()))):
                self._memo[key] = result
                self._count(result)
        return [self._memo[k] for k in keys]

    def _count(self, result: ChatResult) -> None:
        usage = self.usage
        if not result.ok:
            usage.failed += 1
        elif result.cached:
            usage.cached += 1
        else:
            usage.sent += 1
            usage.input_tokens += result.input_tokens
            usage.output_tokens += result.output_tokens
        served = result.extra.get("model") if result.extra else None
        if served:
            usage.served.add(served)
