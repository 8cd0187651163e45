"""Batch execution: model calls through the OpenAI Batch API, or batch files for a self-hosted server.

A grid's calls are tens of thousands of requests that do not need an answer
within seconds. The OpenAI Batch API answers a whole file of them within 24
hours at half the list price; vLLM's ``run_batch`` answers the same file
format offline on the user's own GPUs. This module is everything about those
files and batches that does not depend on the grid:

- the formats: one input line per request (``custom_id``, ``method``,
  ``url``, ``body``; the body is exactly what a live call sends) and the
  output line (``{"id", "custom_id", "response": {"status_code",
  "request_id", "body"}, "error"}``) of the output and error files;
- :class:`BatchClient`: upload a file (``/v1/files``, purpose ``batch``),
  create, retrieve and cancel a batch (``/v1/batches``), download a file;
- :class:`Ledger`: the batches of a response cache, persisted beside it
  (``<cache>/batches/``), each with its requests, so that a session started
  again attaches to a running batch instead of paying for it twice, and an
  exported file's output can be imported later;
- :func:`judge_line`: every output line checked exactly as a live reply is
  (``OpenAIChatModel.read_completion``) before it may enter the cache;
- :class:`BatchRunner`: one round (requests that do not depend on each
  other) submitted or attached, polled with backoff and a progress line,
  harvested into the cache; what a partial batch returned is kept and the
  rest are failures by cause, as live failures are;
- :class:`BatchChatModel`: a ``ChatModel`` whose misses go out as a batch
  round and whose hits come from the cache: under ``--restore-batch`` no
  request is ever sent live.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_restore import jsonl
from pytest_restore.exits import os_cause
from pytest_restore.models.base import ChatRequest, ChatResult, ReplyFormat
from pytest_restore.models.cache import ResponseCache, request_key, try_flock
from pytest_restore.models.decoding import decoding_parameters
from pytest_restore.models.openai_chat import (
    API_KEY_ENV,
    BASE_URL_ENV,
    PLACEHOLDER_KEY,
    OpenAIChatModel,
    failure_cause,
)
from pytest_restore.models.redact import KEY_VARIABLES, redact_keys

# The client here reads this key: it is redacted in every process that follows batches, also one
# that never defined the openai provider (``batch status``, ``batch cancel``).
KEY_VARIABLES.add(API_KEY_ENV)

#: The one endpoint our batches call (the batch is created for it, with the only window the API offers: 24h).
ENDPOINT = "/v1/chat/completions"
#: Statuses after which a batch changes no more.
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
#: Why a request of a batch that ended without answering it failed, by the batch's status.
UNANSWERED = {
    "expired": "batch expired before this request ran (24h window)",
    "cancelled": "batch cancelled before this request ran",
    "failed": "batch failed validation",
    "completed": "batch completed without a line for this request",
}

#: The metadata key a batch carries its ledger entry's token under (how a batch whose create was cut short is found).
INTENT_KEY = "restore_intent"
#: How long past its own ``expires_at`` a batch that has not ended is still polled (the provider's
#: own move to ``expired`` takes a while), before the round stops following it and says so.
EXPIRY_GRACE = 1800.0

#: A role's reply check (``providers.VALIDATORS``): judges and scorers reject what they cannot parse.
Validator = Callable[[str], bool]
#: Where progress lines go.
Say = Callable[[str], None]


@dataclass(frozen=True)
class BatchOptions:
    """How batch rounds are followed: the first wait between polls, and resubmissions of what failed."""

    poll: float = 30.0
    resubmit: int = 0


class BatchError(RuntimeError):
    """A batch could not be submitted or followed (the provider refused, a file is malformed)."""


class LedgerError(BatchError):
    """A ledger file that cannot be read (damaged, or its requests gone): one line naming it.

    Never skipped: a damaged entry may stand for a batch still running, and
    skipping it would submit (and pay for) its requests again.
    """


def _stderr(message: str) -> None:
    sys.stderr.write(f"restore: {message}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- formats


@dataclass(frozen=True)
class BatchItem:
    """One request of a batch: who asks (role, model) and what."""

    role: str
    model: str
    request: ChatRequest

    @property
    def custom_id(self) -> str:
        """The line's id: the role and the response cache's key, so identical requests share one line."""
        return f"{self.role}-{request_key(self.model, self.request)}"

    def body(self) -> dict[str, Any]:
        """The chat-completions body: exactly what a live call sends (decoding by model family)."""
        r = self.request
        return {
            "model": self.model,
            "messages": r.as_openai_messages(),
            **decoding_parameters(self.model, r.max_tokens, r.temperature),
            **r.openai_extras(),
        }

    def input_line(self) -> str:
        """The batch input file's line for this request."""
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
    """The batch input file (JSONL, one line per item)."""
    return "".join(item.input_line() + "\n" for item in items).encode("utf-8")


@dataclass(frozen=True)
class OutputLine:
    """One line of a batch's output or error file."""

    custom_id: str
    status_code: int | None
    body: Any
    error: Mapping[str, Any] | None


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


def judge_line(line: OutputLine, item: BatchItem, reader: OpenAIChatModel) -> ChatResult:
    """The result an output line stands for, checked exactly as a live reply is.

    A success is ``reader.read_completion``'s verdict (key redacted, a reply
    far over its budget refused, the role's validator applied); an error line
    or a non-200 response is a failed call with its cause.
    """
    if line.error is not None and (line.status_code is None or line.status_code == 200):
        code = str(line.error.get("code") or "error")
        message = str(line.error.get("message") or "")
        return ChatResult(text=None, error=_short(f"batch {code}: {message}"))
    if line.status_code != 200:
        detail = ""
        body = line.body
        if isinstance(body, dict):
            inner = body.get("error", body)
            detail = str(inner.get("message") if isinstance(inner, dict) else inner)
        return ChatResult(text=None, error=_short(f"HTTP {line.status_code} (in a batch): {detail}"))
    result, problem = reader.read_completion(line.body, item.request)
    return result if result is not None else ChatResult(text=None, error=problem)


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


# --------------------------------------------------------------------------- the ledger


@dataclass
class LedgerEntry:
    """One batch (or one exported file) of a response cache."""

    #: the file name under ``<cache>/batches/`` (the batch id, or ``export-...``)
    name: str
    #: ``batch`` (sent to a provider) or ``export`` (written for another program)
    kind: str
    #: the round it served (``reader``, ``judge calls``, ...)
    round: str
    model: str
    #: ``submitting`` from before its create is sent until the provider names the batch, then ``pending``
    #: until harvested (``done``), ``cancelled``, ``lost`` (the provider no longer knows it),
    #: ``not created`` (an intent no batch was found for); exports: ``exported``
    state: str
    created: float
    requests: int
    batch_id: str = ""
    base_url: str = ""
    #: whether its answers go into the response cache (a calibration's fresh judge: no)
    cache: bool = True
    #: an export's input file, as written
    input_path: str = ""
    #: the provider's last request counts
    counts: dict[str, int] = field(default_factory=dict)
    status: str = ""
    #: failed requests by cause, once harvested
    failures: dict[str, int] = field(default_factory=dict)
    #: the token in the batch's metadata (``restore_intent``) that finds it at the provider when its
    #: create was cut short (an error after the batch was made, an interrupt)
    intent: str = ""


class Ledger:
    """The batches of one response cache, in ``<cache>/batches/``: one JSON file each, plus its requests.

    An entry is written before a batch's create is sent (the intent, with a
    token the batch carries in its metadata), so a session killed or
    interrupted at any point leaves its batch findable; entries are replaced
    atomically (``os.replace``), every one redacted (:func:`redact_keys`).
    """

    def __init__(self, cache_dir: str | os.PathLike[str]) -> None:
        self.root = Path(cache_dir) / "batches"

    def lock(self) -> Any:
        """An exclusive claim on the ledger (between deciding what to submit and recording it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".lock"
        while True:
            held = try_flock(path)
            if held is not None:
                return held
            time.sleep(0.05)

    def save(self, entry: LedgerEntry, items: Sequence[BatchItem] | None = None) -> None:
        """Record ``entry`` (and, the first time, its requests)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if items is not None:
            _write_atomic(
                self.root / f"{entry.name}.requests.jsonl",
                jsonl.dumps(i.to_json() for i in items),
            )
        text = json.dumps(asdict(entry), indent=1, sort_keys=True)
        _write_atomic(self.root / f"{entry.name}.json", redact_keys(text))

    def entries(self) -> list[LedgerEntry]:
        """Every entry, oldest first; :class:`LedgerError` for one that cannot be read (never skipped)."""
        out = []
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                out.append(LedgerEntry(**data))
            except OSError as err:
                raise LedgerError(f"{path}: cannot read the ledger entry: {os_cause(err)}") from None
            except (ValueError, TypeError) as err:
                detail = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
                raise LedgerError(
                    f"{path}: damaged ledger entry ({detail}); it may stand for a batch still running, so nothing "
                    "is submitted: look for the batch at the provider, then move the file away"
                ) from None
        return sorted(out, key=lambda e: (e.created, e.name))

    def items(self, entry: LedgerEntry) -> dict[str, BatchItem]:
        """The requests of ``entry`` by custom id; :class:`LedgerError` when its file is gone or damaged."""
        path = self.root / f"{entry.name}.requests.jsonl"
        what = f"{entry.batch_id or entry.name} ({entry.requests:,} requests of the {entry.round} round)"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise LedgerError(
                f"{path}: missing: the requests of {what} are gone, so its answers cannot be checked; "
                f"cancel it (`python -m pytest_restore batch cancel`) or move {path.name.replace('.requests.jsonl', '.json')} away"
            ) from None
        except (OSError, UnicodeDecodeError) as err:
            cause = os_cause(err) if isinstance(err, OSError) else "not UTF-8 text"
            raise LedgerError(f"{path}: cannot read the requests of {what}: {cause}") from None
        items = {}
        for n, line in jsonl.numbered_lines(text):
            try:
                item = BatchItem.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError) as err:
                raise LedgerError(f"{path} line {n}: damaged request of {what} ({type(err).__name__})") from None
            items[item.custom_id] = item
        return items

    def forget(self, entry: LedgerEntry) -> None:
        """Remove ``entry`` and its requests (an intent whose upload failed: no batch can exist)."""
        for suffix in (".json", ".requests.jsonl"):
            (self.root / f"{entry.name}{suffix}").unlink(missing_ok=True)


def _write_atomic(path: Path, text: str) -> None:
    # the thread too: two runners of one process (two sessions attaching to one batch) save the same entry
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- the API


class BatchClient:
    """The Files and Batches endpoints of an OpenAI-compatible server, through the official client.

    The key is read from ``$OPENAI_API_KEY`` only and never appears in an
    error, a ledger entry or a log line.
    """

    def __init__(self, base_url: str | None = None, *, timeout: float = 120.0) -> None:
        import openai  # the ``openai`` extra; a run without real models never loads it

        self.base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        key = os.environ.get(API_KEY_ENV)
        self._client = openai.OpenAI(
            api_key=key or PLACEHOLDER_KEY, base_url=self.base_url, timeout=timeout, max_retries=2
        )

    def _call(self, what: str, call: Callable[[], Any]) -> Any:
        import openai

        try:
            return call()
        except openai.OpenAIError as exc:
            raise BatchError(redact_keys(f"{what}: {type(exc).__name__}: {exc}")) from None

    def upload(self, items: Sequence[BatchItem]) -> str:
        """Upload ``items`` as a batch input file; its file id."""
        data = input_file(items)
        uploaded = self._call(
            "uploading the batch input file",
            lambda: self._client.files.create(file=("restore-batch.jsonl", data), purpose="batch"),
        )
        return str(uploaded.id)

    def create(self, file_id: str, metadata: Mapping[str, str]) -> str:
        """Create the batch of an uploaded file; its id.

        Sent once, never retried: a create that made the batch and then
        failed to answer would make a second, paid batch if it were sent
        again. After an error the caller looks for it (:meth:`find`).
        """
        batch = self._call(
            "creating the batch",
            lambda: self._client.with_options(max_retries=0).batches.create(
                input_file_id=file_id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata=dict(metadata),
            ),
        )
        return str(batch.id)

    def find(self, intent: str, since: float) -> str | None:
        """The id of the batch whose metadata carries ``intent`` (created after ``since``), or ``None``."""

        def scan() -> str | None:
            for batch in self._client.batches.list(limit=100):  # newest first; the pages follow on
                if (batch.metadata or {}).get(INTENT_KEY) == intent:
                    return str(batch.id)
                if batch.created_at < since - 600:
                    return None
            return None

        found: str | None = self._call("looking for the batch by its metadata", scan)
        return found

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        """The batch object as plain values (``status``, ``request_counts``, file ids, ``errors``)."""
        batch = self._call(f"reading batch {batch_id}", lambda: self._client.batches.retrieve(batch_id))
        return dict(batch.model_dump())

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the provider to cancel the batch; the batch object."""
        batch = self._call(f"cancelling batch {batch_id}", lambda: self._client.batches.cancel(batch_id))
        return dict(batch.model_dump())

    def content(self, file_id: str) -> str:
        """A file's content (an output or error file)."""
        response = self._call(f"downloading file {file_id}", lambda: self._client.files.content(file_id))
        return bytes(response.content).decode("utf-8")

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()


def is_unknown_batch(error: BatchError) -> bool:
    """Whether the provider answered that it knows no such batch (a 404)."""
    return "NotFoundError" in str(error)


# --------------------------------------------------------------------------- rounds


@dataclass
class RoundOutcome:
    """What one round returned: a result per requested item, and which batches served it."""

    results: dict[str, ChatResult] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    attached: list[str] = field(default_factory=list)

    def failures(self) -> Counter[str]:
        """Failed requests by cause."""
        return Counter(failure_cause(r.error or "") for r in self.results.values() if not r.ok)


class BatchRunner:
    """Runs rounds of batch requests for one response cache and one provider."""

    def __init__(
        self,
        cache_dir: str | os.PathLike[str],
        validators: Mapping[str, Validator | None],
        *,
        base_url: str | None = None,
        poll: float = 30.0,
        poll_cap: float = 600.0,
        resubmit: int = 0,
        say: Say = _stderr,
        sleep: Callable[[float], None] = time.sleep,
        client: BatchClient | None = None,
    ) -> None:
        """``poll`` is the first wait between two looks at a batch (it grows 1.5x up to
        ``poll_cap``); ``resubmit`` how many times a round sends what failed again as a new batch."""
        self.cache_dir = Path(cache_dir)
        self.cache = ResponseCache(cache_dir)
        self.ledger = Ledger(cache_dir)
        self.validators = dict(validators)
        self.base_url = base_url or os.environ.get(BASE_URL_ENV) or None
        self.poll = poll
        self.poll_cap = poll_cap
        self.resubmit = resubmit
        self.say: Say = lambda line: say(self.redact(line))
        self._sleep = sleep
        self._client = client
        self._readers: dict[tuple[str, str], OpenAIChatModel] = {}

    def redact(self, text: str) -> str:
        """``text`` without an API key in any form a server may echo it in (the one redaction, :func:`redact_keys`)."""
        return redact_keys(text)

    def _redacted(self, result: ChatResult) -> ChatResult:
        text = None if result.text is None else redact_keys(result.text)
        error = None if result.error is None else redact_keys(result.error)
        return replace(result, text=text, error=error)

    @property
    def client(self) -> BatchClient:
        """The provider's client, made on first use."""
        if self._client is None:
            self._client = BatchClient(self.base_url)
        return self._client

    def close(self) -> None:
        """Release the client."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def reader(self, item: BatchItem) -> OpenAIChatModel:
        """The model whose rules an output line of ``item`` is read by (nothing is sent through it)."""
        key = (item.model, item.role)
        if key not in self._readers:
            self._readers[key] = OpenAIChatModel(model=item.model, validator=self.validators.get(item.role))
        return self._readers[key]

    def uncached(self, items: Iterable[BatchItem]) -> list[BatchItem]:
        """The distinct items the cache does not answer (a reply the role's validator rejects counts as absent)."""
        out: dict[str, BatchItem] = {}
        for item in items:
            if item.custom_id in out:
                continue
            hit = self.cache.peek(request_key(item.model, item.request))
            validator = self.validators.get(item.role)
            if hit is not None and hit.text is not None and (validator is None or _accepts(validator, hit.text)):
                continue
            out[item.custom_id] = item
        return list(out.values())

    def run_round(self, name: str, items: Sequence[BatchItem], *, cache: bool = True) -> RoundOutcome:
        """Answer ``items`` by batch: attach to pending batches that hold them, submit the rest, wait, harvest.

        ``cache``: store the answers in the response cache (a model without
        a cache, the calibration's fresh judge, gets them only returned).
        Answers of a partial batch are kept; what it did not answer fails
        with the batch's cause. With ``resubmit``, failed requests go out
        again as a new batch, that many times at most.
        """
        wanted = {item.custom_id: item for item in items}
        outcome = RoundOutcome()
        todo = dict(wanted)
        for attempt in range(self.resubmit + 1):
            part = self._one_pass(name if attempt == 0 else f"{name} (resubmitted {attempt})", todo, cache, outcome)
            outcome.results.update(part)
            todo = {cid: wanted[cid] for cid, result in part.items() if not result.ok}
            if not todo:
                break
        return outcome

    def _one_pass(
        self, name: str, todo: Mapping[str, BatchItem], cache: bool, outcome: RoundOutcome
    ) -> dict[str, ChatResult]:
        with self.ledger.lock():
            # a batch sent elsewhere (another base URL) cannot be followed from here
            here = [e for e in self.ledger.entries() if e.kind == "batch" and e.base_url == (self.base_url or "")]
            for entry in here:
                if entry.state == "submitting":
                    self._resolve_intent(entry)
            pending = [e for e in here if e.state == "pending"]
            followed: list[LedgerEntry] = []
            covered: set[str] = set()
            for entry in pending:
                ids = set(self.ledger.items(entry))
                if ids & (set(todo) - covered):
                    followed.append(entry)
                    covered |= ids
                    outcome.attached.append(entry.batch_id)
                    self.say(f"batch {name}: attaching to {entry.batch_id} ({entry.requests:,} requests, submitted earlier)")
            rest = [item for cid, item in todo.items() if cid not in covered]
            by_model: dict[str, list[BatchItem]] = {}
            for item in rest:
                by_model.setdefault(item.model, []).append(item)  # one model per batch, as the API requires
            for model, group in sorted(by_model.items()):
                entry = self._submit(name, model, group, cache)
                followed.append(entry)
                outcome.created.append(entry.batch_id)
                self.say(f"batch {name}: submitted {entry.batch_id} ({len(group):,} {model} requests)")
        results: dict[str, ChatResult] = {}
        for entry in followed:
            results.update(self._follow(name, entry))
        return {cid: results.get(cid) or ChatResult(text=None, error=UNANSWERED["completed"]) for cid in todo}

    def _submit(self, name: str, model: str, group: Sequence[BatchItem], cache: bool) -> LedgerEntry:
        """Upload and create one batch, its intent recorded in the ledger before the create is sent.

        The create is sent once. After an error the batch is looked for by
        the intent in its metadata (a create can make the batch and still
        fail to answer); after an interrupt the entry stays ``submitting``
        and the next run looks for it before it submits anything.
        """
        intent = os.urandom(8).hex()
        entry = LedgerEntry(
            name=f"batch-{intent}", kind="batch", round=name, model=model, state="submitting",
            created=time.time(), requests=len(group), base_url=self.base_url or "", cache=cache, intent=intent,
        )
        self.ledger.save(entry, group)
        try:
            entry.input_path = self.client.upload(group)
        except BatchError:
            self.ledger.forget(entry)  # nothing was created: no batch can carry this intent
            raise
        except KeyboardInterrupt:
            self.ledger.forget(entry)
            raise
        try:
            entry.batch_id = self.client.create(entry.input_path, {"restore_round": name[:64], INTENT_KEY: intent})
        except KeyboardInterrupt:
            self.ledger.save(entry)
            self.say(
                f"batch {name}: interrupted while creating a batch of {len(group):,} {model} requests: one may exist "
                f"at the provider (metadata {INTENT_KEY}={intent}, recorded in {self.ledger.root}); the next run "
                "looks for it before submitting anything, and `python -m pytest_restore batch status` lists it"
            )
            raise
        except BatchError as err:
            found = self._look_for(entry, str(err))
            if found is None:
                entry.state = "not created"
                self.ledger.save(entry)
                raise BatchError(f"{err}; no batch carrying this request's intent is listed at the provider") from None
            self.say(f"batch {name}: creating the batch answered an error, but the provider made it: {found} (not created again)")
            entry.batch_id = found
        entry.state = "pending"
        self.ledger.save(entry)
        return entry

    def _look_for(self, entry: LedgerEntry, why: str) -> str | None:
        """The batch ``entry``'s intent names, or ``None``; :class:`BatchError` when the lookup fails too."""
        try:
            return self.client.find(entry.intent, entry.created)
        except BatchError as err:
            self.ledger.save(entry)  # still ``submitting``: the next run looks again
            raise BatchError(
                f"{why}; a batch of {entry.requests:,} {entry.model} requests may exist at the provider "
                f"(metadata {INTENT_KEY}={entry.intent}) and looking for it failed too ({err}): nothing is "
                "submitted until it is found or known absent; run again later"
            ) from None

    def _resolve_intent(self, entry: LedgerEntry) -> None:
        """An entry left ``submitting`` by an interrupted session: the batch it made, or none (said either way)."""
        found = self._look_for(entry, f"batch {entry.round}: an interrupted session's create")
        if found is None:
            entry.state = "not created"
            self.say(f"batch {entry.round}: an interrupted session's create made no batch (none carries its intent)")
        else:
            entry.state, entry.batch_id = "pending", found
            self.say(f"batch {entry.round}: found {found}, created by an interrupted session (not created again)")
        self.ledger.save(entry)

    def _follow(self, name: str, entry: LedgerEntry) -> dict[str, ChatResult]:
        """Poll ``entry`` until it ends, then harvest it."""
        started = time.monotonic()
        wait = self.poll
        shown = ""
        try:
            while True:
                try:
                    batch = self.client.retrieve(entry.batch_id)
                except BatchError as err:
                    if not is_unknown_batch(err):
                        raise
                    entry.state = "lost"
                    self.ledger.save(entry)
                    error = f"batch {entry.batch_id} unknown to the provider"
                    return {cid: ChatResult(text=None, error=error) for cid in self.ledger.items(entry)}
                status = str(batch.get("status"))
                counts = {k: int(v or 0) for k, v in (batch.get("request_counts") or {}).items()}
                line = (
                    f"batch {name} {entry.batch_id}: {status}, {counts.get('completed', 0):,}/"
                    f"{counts.get('total', entry.requests):,} completed, {counts.get('failed', 0):,} failed, "
                    f"{_elapsed(time.monotonic() - started)} elapsed"
                )
                if line.split(", ")[:3] != shown.split(", ")[:3]:
                    self.say(line)
                shown = line
                if status in TERMINAL:
                    entry.counts, entry.status = counts, status
                    return self._harvest(entry, batch)
                expires = batch.get("expires_at")
                if isinstance(expires, (int, float)) and time.time() > expires + EXPIRY_GRACE:
                    late = _elapsed(time.time() - expires)
                    self.say(
                        f"batch {name} {entry.batch_id}: still {status} {late} after its own expires_at: no longer "
                        f"polled (it stays in the ledger: `python -m pytest_restore batch status` or `batch cancel`)"
                    )
                    error = f"batch {entry.batch_id} {status} past its expires_at: no longer polled"
                    return {cid: ChatResult(text=None, error=error) for cid in self.ledger.items(entry)}
                self._sleep(wait)
                wait = min(wait * 1.5, self.poll_cap)
        except KeyboardInterrupt:
            self.say(
                f"batch {entry.batch_id} is still running at the provider and was not cancelled: run the same "
                f"command again to attach to it, or cancel it with `python -m pytest_restore batch cancel "
                f"--cache {self.cache_dir}`"
            )
            raise

    def _harvest(self, entry: LedgerEntry, batch: Mapping[str, Any]) -> dict[str, ChatResult]:
        """Every answer of an ended batch, checked; answers go into the cache when the entry says so."""
        items = self.ledger.items(entry)
        lines: list[tuple[str, str]] = []
        for key in ("output_file_id", "error_file_id"):
            file_id = batch.get(key)
            if file_id:
                text = self.client.content(str(file_id))
                lines += [(f"{key} {file_id} line {n}", t) for n, t in jsonl.numbered_lines(text)]
        results, refused = self.judge_lines(lines, items, cache=entry.cache)
        status = str(batch.get("status"))
        cause = UNANSWERED.get(status, f"batch {status}")
        if status == "failed":
            errors = (batch.get("errors") or {}).get("data") or []
            if errors:
                cause += ": " + "; ".join(str(e.get("message", e)) for e in errors[:3])
        for cid in items:
            results.setdefault(cid, ChatResult(text=None, error=_short(self.redact(cause))))
        entry.state = "done"
        entry.failures = dict(Counter(failure_cause(r.error or "") for r in results.values() if not r.ok))
        if refused:
            entry.failures.update({f"refused: {k}": v for k, v in refused.items()})
            # said, not only kept in the ledger: an output file answering requests the batch never
            # held is a batch (or a provider) to look at, whatever became of the batch's own lines
            self.say(
                f"batch {entry.batch_id or entry.name}: "
                + "; ".join(f"{n:,} output lines refused ({why})" for why, n in refused.most_common())
                + ": none of them stored"
            )
        self.ledger.save(entry)
        return results

    def judge_lines(
        self, lines: Iterable[tuple[str, str]], items: Mapping[str, BatchItem], *, cache: bool = True
    ) -> tuple[dict[str, ChatResult], Counter[str]]:
        """Results of output lines (``(where, text)``) for ``items``; lines refused, by reason.

        A line naming a request that is not in ``items`` is refused, never
        stored; a malformed line is refused with its reason. A request
        answered by two lines with different answers keeps neither: its
        result is a failure naming both lines. A success goes into the cache
        when ``cache``. Every text is redacted (:meth:`redact`).
        """
        refused: Counter[str] = Counter()
        by_id: dict[str, list[tuple[str, OutputLine]]] = {}
        for where, text in lines:
            try:
                line = parse_output_line(text, where)
            except BatchError as err:
                refused[self.redact(f"malformed line ({str(err).split(': ', 1)[-1][:80]})")] += 1
                continue
            if line.custom_id not in items:
                refused["custom_id never exported or submitted"] += 1
                continue
            by_id.setdefault(line.custom_id, []).append((where, line))
        results: dict[str, ChatResult] = {}
        for cid, found in by_id.items():
            item = items[cid]
            judged = [(where, self._redacted(judge_line(line, item, self.reader(item)))) for where, line in found]
            answered = [(where, r) for where, r in judged if r.ok]
            if len({r.text for _, r in answered}) > 1:
                (first, _), (second, _) = answered[0], next(a for a in answered if a[1].text != answered[0][1].text)
                error = f"batch answered custom_id {cid[:24]}... twice, differently ({first}; {second}): neither kept"
                results[cid] = ChatResult(text=None, error=error)
                continue
            result = answered[0][1] if answered else judged[0][1]
            if result.ok and cache:
                self.cache.put(item.model, item.request, result)
            results[cid] = result
        return results, refused


def _accepts(validator: Validator, text: str) -> bool:
    try:
        return bool(validator(text))
    except Exception:  # noqa: BLE001 - a validator that crashes rejects
        return False


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


# --------------------------------------------------------------------------- the model


class BatchChatModel:
    """A ``ChatModel`` that never sends a live call: misses go out as one batch round, hits come from the cache.

    ``inner`` is the role's ``OpenAIChatModel`` made ``cache_only``; a
    model without a cache (the calibration's fresh judge) gets every answer
    from its batches and stores none.
    """

    def __init__(self, inner: OpenAIChatModel, role: str, runner: BatchRunner) -> None:
        self.inner = inner
        self.role = role
        self.runner = runner
        #: Failed calls by cause (the batch's and the cache's), as ``OpenAIChatModel.failure_causes``.
        self.failure_causes: Counter[str] = Counter()

    @property
    def name(self) -> str:
        """The inner model's name (``openai:MODEL``)."""
        return self.inner.name

    @property
    def model(self) -> str:
        """The provider's model name."""
        return self.inner.model

    @property
    def fatal_error(self) -> str | None:
        """The inner model's fatal error (none: it sends nothing)."""
        return self.inner.fatal_error

    @property
    def fatal_io(self) -> bool:
        """Whether the inner model's fatal error is its cache that could not be written."""
        return self.inner.fatal_io

    @property
    def concurrency_peak(self) -> int:
        """Batches have no client-side concurrency."""
        return 0

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request in order: one batch round for what the cache does not hold."""
        if not requests:
            return []
        items = [BatchItem(self.role, self.inner.model, r) for r in requests]
        caching = self.inner.cache is not None
        misses = self.runner.uncached(items) if caching else list({i.custom_id: i for i in items}.values())
        fresh: dict[str, ChatResult] = {}
        if misses:
            try:
                fresh = self.runner.run_round(f"{self.role} calls", misses, cache=caching).results
            except BatchError as err:  # the provider refused the batch: every miss fails with why, said once
                if self.inner.fatal_error is None:
                    self.inner.fatal_error = str(err)
                fresh = {i.custom_id: ChatResult(text=None, error=str(err)) for i in misses}
        rest = [i for i in items if i.custom_id not in fresh]
        answered = dict(zip((i.custom_id for i in rest), self.inner.run([i.request for i in rest]))) if rest else {}
        for result in {**fresh, **answered}.values():
            if not result.ok:
                self.failure_causes[failure_cause(result.error or "")] += 1
        return [fresh.get(i.custom_id) or answered[i.custom_id] for i in items]

    def close(self) -> None:
        """Release the inner model and the batch client."""
        self.inner.close()
        self.runner.close()


def with_counts(entry: LedgerEntry, batch: Mapping[str, Any]) -> LedgerEntry:
    """``entry`` with the provider's latest status and request counts."""
    counts = {k: int(v or 0) for k, v in (batch.get("request_counts") or {}).items()}
    return replace(entry, status=str(batch.get("status")), counts=counts)
