"""OpenAI's Files and Batches API: the ``openai`` provider's batch interface (``batch_api.BatchAPI``).

A round is one input file (one line per request: ``custom_id``, ``method``,
``url``, ``body``; the body exactly what a live call sends), uploaded to
``/v1/files`` (purpose ``batch``) and named by one create on
``/v1/batches`` (the only window the API offers: 24 h), with the intent
token in the batch's metadata. A batch goes ``validating``,
``in_progress``, ``finalizing`` and ends ``completed``, ``failed``,
``expired`` or ``cancelled``; its answers are an output file and an error
file whose lines read ``{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}``. The same line formats are those of
vLLM's ``run_batch`` (``batch export`` and ``batch import``).

It goes through the official client (the ``openai`` extra); the key is read
from ``$OPENAI_API_KEY`` only and never appears in an error, a ledger entry
or a log line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pytest_restore import jsonl
from pytest_restore.models.batch_api import (
    ENDPOINT,
    INTENT_KEY,
    AnswerReader,
    BatchAPI,
    BatchError,
    BatchItem,
    BatchNotFound,
    OutputLine,
    Validator,
    input_file,
)
from pytest_restore.models.openai_chat import (
    API_KEY_ENV,
    BASE_URL_ENV,
    PLACEHOLDER_KEY,
    PROVIDER,
    OpenAIChatModel,
)
from pytest_restore.models.redact import KEY_VARIABLES, redact_keys

# The client here reads this key: it is redacted in every process that follows batches, also one
# that never defined the openai provider (``batch status``, ``batch cancel``).
KEY_VARIABLES.add(API_KEY_ENV)

#: Statuses after which a batch changes no more.
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
#: Why a request of a batch that ended without answering it failed, by the batch's status.
UNANSWERED = {
    "expired": "batch expired before this request ran (24h window)",
    "cancelled": "batch cancelled before this request ran",
    "failed": "batch failed validation",
    "completed": "batch completed without a line for this request",
}


def parse_output_line(text: str, where: str) -> OutputLine:
    """An output line, or :class:`BatchError` naming ``where`` (file and line) and what is wrong."""
    try:
        line = json.loads(text)
    except ValueError as exc:
        raise BatchError(f"{where}: not JSON ({exc})") from None
    if not isinstance(line, dict) or not isinstance(line.get("custom_id"), str):
        raise BatchError(f"{where}: field 'custom_id': missing or not a string")
    response = line.get("response")
    error = line.get("error")
    if error is not None and not isinstance(error, dict):
        error = {"message": str(error)}
    if response is None:
        if error is None:
            raise BatchError(f"{where}: custom_id {line['custom_id']}: neither 'response' nor 'error'")
        return OutputLine(line["custom_id"], None, None, error)
    if not isinstance(response, dict) or not isinstance(response.get("status_code"), int):
        raise BatchError(f"{where}: custom_id {line['custom_id']}: field 'response.status_code': missing or not a number")
    return OutputLine(line["custom_id"], int(response["status_code"]), response.get("body"), error)


class OpenAIBatches(BatchAPI):
    """The Files and Batches endpoints of an OpenAI-compatible server, through the official client."""

    provider = PROVIDER

    def __init__(self, base_url: str | None = None, *, timeout: float = 120.0) -> None:
        """``base_url``: the run's, else ``$OPENAI_BASE_URL``, else OpenAI's API; the client is made on first use."""
        super().__init__(base_url)
        self.timeout = timeout
        self._client: Any = None

    def resolve_base_url(self, option: str | None) -> str | None:
        """The run's base URL, else ``$OPENAI_BASE_URL`` (``None``: OpenAI's API)."""
        return option or os.environ.get(BASE_URL_ENV) or None

    @property
    def client(self) -> Any:
        """The official client (the ``openai`` extra; a run without real models never loads it)."""
        if self._client is None:
            import openai

            key = os.environ.get(API_KEY_ENV)
            self._client = openai.OpenAI(
                api_key=key or PLACEHOLDER_KEY, base_url=self.base_url, timeout=self.timeout, max_retries=2
            )
        return self._client

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        import openai

        try:
            return call()
        except openai.NotFoundError as exc:
            raise BatchNotFound(redact_keys(f"{what}: {type(exc).__name__}: {exc}")) from None
        except openai.OpenAIError as exc:
            raise BatchError(redact_keys(f"{what}: {type(exc).__name__}: {exc}")) from None

    def make_reader(self, model: str, validator: Validator | None) -> AnswerReader:
        """An :class:`OpenAIChatModel` of ``model`` (its cache name is the bare model name)."""
        return OpenAIChatModel(model=model, validator=validator)

    def request_line(self, item: BatchItem) -> dict[str, Any]:
        """``{"custom_id", "method", "url", "body"}``."""
        return {"custom_id": item.custom_id, "method": "POST", "url": ENDPOINT, "body": item.body()}

    def input_file(self, items: Sequence[BatchItem]) -> bytes:
        """The batch input file (JSONL, one line per item)."""
        return input_file(items)

    def upload(self, items: Sequence[BatchItem]) -> str:
        """Upload ``items`` as a batch input file; its file id."""
        data = input_file(items)
        uploaded = self._call(
            "uploading the batch input file",
            lambda: self.client.files.create(file=("restore-batch.jsonl", data), purpose="batch"),
        )
        return str(uploaded.id)

    def create(self, uploaded: str, items: Sequence[BatchItem], metadata: Mapping[str, str]) -> str:
        """Create the batch of an uploaded file; its id (sent once: ``max_retries=0``)."""
        batch = self._call(
            "creating the batch",
            lambda: self.client.with_options(max_retries=0).batches.create(
                input_file_id=uploaded,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata=dict(metadata),
            ),
        )
        return str(batch.id)

    def find(self, intent: str, since: float, requests: int, claimed: Collection[str]) -> str | None:
        """The id of the batch whose metadata carries ``intent`` (created after ``since``), or ``None``."""

        def scan() -> str | None:
            for batch in self.client.batches.list(limit=100):  # newest first; the pages follow on
                if (batch.metadata or {}).get(INTENT_KEY) == intent:
                    return str(batch.id)
                if batch.created_at < since - 600:
                    return None
            return None

        found: str | None = self._call("looking for the batch by its metadata", scan)
        return found

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        """The batch object as plain values (``status``, ``request_counts``, file ids, ``errors``)."""
        batch = self._call(f"reading batch {batch_id}", lambda: self.client.batches.retrieve(batch_id))
        return dict(batch.model_dump())

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the provider to cancel the batch; the batch object."""
        batch = self._call(f"cancelling batch {batch_id}", lambda: self.client.batches.cancel(batch_id))
        return dict(batch.model_dump())

    def ended(self, batch: Mapping[str, Any]) -> bool:
        """``completed``, ``failed``, ``expired`` or ``cancelled``."""
        return str(batch.get("status")) in TERMINAL

    def content(self, file_id: str) -> str:
        """A file's content (an output or error file)."""
        response = self._call(f"downloading file {file_id}", lambda: self.client.files.content(file_id))
        return bytes(response.content).decode("utf-8")

    def results(self, batch: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The lines of the output file, then of the error file."""
        lines: list[tuple[str, str]] = []
        for key in ("output_file_id", "error_file_id"):
            file_id = batch.get(key)
            if file_id:
                text = self.content(str(file_id))
                lines += [(f"{key} {file_id} line {n}", t) for n, t in jsonl.numbered_lines(text)]
        return lines

    def parse_line(self, text: str, where: str) -> OutputLine:
        """An output or error file's line (:func:`parse_output_line`)."""
        return parse_output_line(text, where)

    def unanswered(self, batch: Mapping[str, Any]) -> str:
        """By the batch's status; a failed batch's first validation errors."""
        status = str(batch.get("status"))
        cause = UNANSWERED.get(status, f"batch {status}")
        if status == "failed":
            errors = (batch.get("errors") or {}).get("data") or []
            if errors:
                cause += ": " + "; ".join(str(e.get("message", e)) for e in errors[:3])
        return cause

    def close(self) -> None:
        """Close the client's connections."""
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None
