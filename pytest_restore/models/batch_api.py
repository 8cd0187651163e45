"""What a provider that batches implements: one request of a round, one answer line, and its batch interface.

A provider declares ``batch`` among its capabilities and hands out a
:class:`BatchAPI` (``ModelProvider.batches``) bound to a base URL. The
batch interface is everything that differs between providers' batch
services; everything else (the ledger, the intent recorded before a create,
resuming, polling, checking every answer as a live reply is checked, the
``batch`` subcommands) is common (``batch``, ``batch_ledger``) and knows no
provider. A batch interface says:

- what a request looks like in its input (:meth:`BatchAPI.request_line`) and
  what id the provider takes for it (:meth:`BatchAPI.wire_id`: OpenAI takes
  any string, Anthropic at most 64 characters);
- how a round is submitted (:meth:`~BatchAPI.upload` then the one
  :meth:`~BatchAPI.create`, never retried), found again after a create cut
  short (:meth:`~BatchAPI.find`), followed (:meth:`~BatchAPI.retrieve`,
  :meth:`~BatchAPI.ended`), cancelled (:meth:`~BatchAPI.cancel`) and
  harvested (:meth:`~BatchAPI.results`, read line by line with
  :meth:`~BatchAPI.parse_line` into an :class:`OutputLine`);
- the model whose rules an answer is read by (:meth:`~BatchAPI.reader`: the
  provider's own managed chat model, which sends nothing here: an
  :class:`AnswerReader`).

A batch object, as :meth:`~BatchAPI.retrieve` returns it, is plain values
in one shape for every provider: ``status`` (the provider's own word),
``request_counts`` with ``total``, ``completed`` and ``failed`` (and the
provider's own counts beside them), ``expires_at`` (seconds since the epoch,
or ``None``) and whatever else the provider's object carries.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_restore import jsonl
from pytest_restore.models.base import ChatRequest, ChatResult, ReplyFormat
from pytest_restore.models.cache import request_key
from pytest_restore.models.decoding import decoding_parameters

#: The endpoint an OpenAI batch line calls (the format ``batch export`` writes for vLLM's ``run_batch`` too).
ENDPOINT = "/v1/chat/completions"
#: The metadata key a batch carries its ledger entry's token under, where the provider keeps metadata.
INTENT_KEY = "restore_intent"

#: A role's reply check (``providers.VALIDATORS``): judges and scorers reject what they cannot parse.
Validator = Callable[[str], bool]


class AnswerReader(Protocol):
    """What an answer is read by: a provider's managed chat model (the managed layer's), never sending."""

    def read_completion(self, completion: Any, request: ChatRequest) -> tuple[ChatResult | None, str]:
        """A decoded answer checked as a live reply is (``None`` and why, when unusable)."""
        ...

    def body(self, request: ChatRequest) -> dict[str, Any]:
        """The body a live call of ``request`` sends."""
        ...

    def close(self) -> None:
        """Release its connections."""
        ...


class BatchError(RuntimeError):
    """A batch could not be submitted or followed (the provider refused, a file is malformed)."""


class BatchNotFound(BatchError):
    """The provider answered that it knows no such batch (a 404)."""


def is_unknown_batch(error: BatchError) -> bool:
    """Whether the provider answered that it knows no such batch (a 404)."""
    return isinstance(error, BatchNotFound) or "NotFoundError" in str(error)


@dataclass(frozen=True)
class BatchItem:
    """One request of a batch: who asks (role, model: the name its replies are cached under) and what."""

    role: str
    model: str
    request: ChatRequest

    @property
    def custom_id(self) -> str:
        """The line's id: the role and the response cache's key, so identical requests share one line."""
        return f"{self.role}-{request_key(self.model, self.request)}"

    def body(self) -> dict[str, Any]:
        """The chat-completions body: exactly what a live OpenAI call sends (decoding by model family)."""
        r = self.request
        return {
            "model": self.model,
            "messages": r.as_openai_messages(),
            **decoding_parameters(self.model, r.max_tokens, r.temperature),
            **r.openai_extras(),
        }

    def input_line(self) -> str:
        """The OpenAI batch input file's line for this request."""
        line = {"custom_id": self.custom_id, "method": "POST", "url": ENDPOINT, "body": self.body()}
        return jsonl.dumps_line(line, compact=True)

    def to_json(self) -> dict[str, Any]:
        """Everything needed to rebuild the item (the ledger's requests file)."""
        r = self.request
        return {
            "custom_id": self.custom_id,
            "role": self.role,
            "model": self.model,
            "messages": [list(m) for m in r.messages],
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            **({"reply_format": r.reply_format.to_json()} if r.reply_format is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchItem:
        """The item :meth:`to_json` wrote."""
        request = ChatRequest(
            messages=tuple((str(role), str(content)) for role, content in data["messages"]),
            max_tokens=int(data["max_tokens"]),
            temperature=float(data["temperature"]),
            reply_format=ReplyFormat(**data["reply_format"]) if data.get("reply_format") else None,
        )
        return cls(str(data["role"]), str(data["model"]), request)


def body_digest(body: Mapping[str, Any]) -> str:
    """A short digest of a request body (to tell whether a line's request is the one exported)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def input_file(items: Sequence[BatchItem]) -> bytes:
    """The OpenAI batch input file (JSONL, one line per item)."""
    return "".join(item.input_line() + "\n" for item in items).encode("utf-8")


@dataclass(frozen=True)
class OutputLine:
    """One answer line of a batch, in every provider's terms: a reply body with its status, or an error."""

    custom_id: str
    status_code: int | None
    body: Any
    error: Mapping[str, Any] | None


def judge_line(line: OutputLine, item: BatchItem, reader: AnswerReader) -> ChatResult:
    """The result an answer line stands for, checked exactly as a live reply is.

    A success is ``reader.read_completion``'s verdict (key redacted, a reply
    far over its budget refused, the role's validator applied); an error line
    or a non-200 response is a failed call with its cause.
    """
    if line.error is not None and (line.status_code is None or line.status_code == 200):
        code = str(line.error.get("code") or "error")
        message = str(line.error.get("message") or "")
        return ChatResult(text=None, error=short(f"batch {code}: {message}"))
    if line.status_code != 200:
        detail = ""
        body = line.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            detail = str(inner.get("message") if isinstance(inner, dict) else inner)
        return ChatResult(text=None, error=short(f"HTTP {line.status_code} (in a batch): {detail}"))
    result, problem = reader.read_completion(line.body, item.request)
    return result if result is not None else ChatResult(text=None, error=problem)


def short(text: str) -> str:
    """``text`` cut to 200 characters (a cause said in a line)."""
    return text if len(text) <= 200 else text[:197] + "..."


class BatchAPI(ABC):
    """One provider's batch service at one base URL (see the module docstring); sends only when asked."""

    #: The provider's name (``openai``): ledger entries of its batches say it.
    provider: str = ""

    def __init__(self, base_url: str | None = None) -> None:
        """``base_url`` is the run's option; the provider resolves it (its own variable, its own API)."""
        self.base_url: str | None = self.resolve_base_url(base_url)
        self._readers: dict[tuple[str, Validator | None], AnswerReader] = {}

    def resolve_base_url(self, option: str | None) -> str | None:
        """Where the batches go (``None``: the provider's own API), from the run's option and the environment."""
        return option or None

    def wire_id(self, custom_id: str) -> str:
        """The id a request goes by at the provider (the item's own, unless the provider limits it)."""
        return custom_id

    def reader(self, model: str, validator: Validator | None) -> AnswerReader:
        """The model whose rules an answer to ``model`` (a cache name) is read by; made once, never sends."""
        key = (model, validator)
        if key not in self._readers:
            self._readers[key] = self.make_reader(model, validator)
        return self._readers[key]

    @abstractmethod
    def make_reader(self, model: str, validator: Validator | None) -> AnswerReader:
        """A new reader of ``model``'s answers (the provider's managed chat model, nothing sent through it)."""

    @abstractmethod
    def request_line(self, item: BatchItem) -> dict[str, Any]:
        """The request as the provider's batch input takes it (its id and exactly the body a live call sends)."""

    def request_body(self, line: Mapping[str, Any]) -> Any:
        """The request body of an input line :meth:`request_line` wrote (to tell an edited one apart);
        ``KeyError`` when it has none."""
        return line["body"]

    def input_file(self, items: Sequence[BatchItem]) -> bytes:
        """The requests as a JSONL file, one :meth:`request_line` a line (``batch export``)."""
        return "".join(jsonl.dumps_line(self.request_line(i), compact=True) + "\n" for i in items).encode("utf-8")

    @abstractmethod
    def upload(self, items: Sequence[BatchItem]) -> str:
        """What the create names: an uploaded input file's id, or ``""`` when the requests travel in the create."""

    @abstractmethod
    def create(self, uploaded: str, items: Sequence[BatchItem], metadata: Mapping[str, str]) -> str:
        """Create the batch; its id. Sent once, never retried: a create that made the batch and failed
        to answer would make a second, paid batch if sent again (the caller looks for it: :meth:`find`)."""

    @abstractmethod
    def find(self, intent: str, since: float, requests: int, claimed: Collection[str]) -> str | None:
        """The id of the batch an interrupted create made (``intent`` its token, created after ``since``, of
        ``requests`` requests, none of ``claimed``), or ``None`` when none was; :class:`BatchError` when unsure."""

    def intent_words(self, intent: str, requests: int) -> str:
        """How a batch whose create was cut short is recognised at the provider, for messages."""
        return f"metadata {INTENT_KEY}={intent}"

    @abstractmethod
    def retrieve(self, batch_id: str) -> dict[str, Any]:
        """The batch as plain values in the common shape (see the module docstring)."""

    @abstractmethod
    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the provider to cancel the batch; the batch, as :meth:`retrieve`."""

    @abstractmethod
    def ended(self, batch: Mapping[str, Any]) -> bool:
        """Whether the batch changes no more (its answers can be read)."""

    @abstractmethod
    def results(self, batch: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Every answer line of an ended batch, as (where: file and line, text)."""

    @abstractmethod
    def parse_line(self, text: str, where: str) -> OutputLine:
        """One answer line, or :class:`BatchError` naming ``where`` and what is wrong."""

    @abstractmethod
    def unanswered(self, batch: Mapping[str, Any]) -> str:
        """Why a request of an ended batch that has no answer line failed."""

    def close(self) -> None:
        """Release the connections (the object stays usable: they are made again on use)."""
        for reader in self._readers.values():
            reader.close()
