"""The ledger of a response cache's batches: what was submitted or exported, so nothing is paid for twice.

Every provider's batches go into one ledger, beside the cache
(``<cache>/batches/``): one JSON file per batch (or exported file) and one
file of its requests. An entry is written before a batch's create is sent
(the intent), so a session killed or interrupted at any point leaves its
batch findable; a session started again attaches to a running batch
instead of paying for it twice, and an exported file's answers can be
imported later. A damaged entry is never skipped: it may stand for a batch
still running.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_restore import jsonl
from pytest_restore.exits import os_cause
from pytest_restore.models.batch_api import BatchError, BatchItem
from pytest_restore.models.cache import try_flock
from pytest_restore.models.redact import redact_keys

#: The provider of an entry that names none: the ledger's first, written before providers batched.
FIRST_PROVIDER = "openai"


class LedgerError(BatchError):
    """A ledger file that cannot be read (damaged, or its requests gone): one line naming it.

    Never skipped: a damaged entry may stand for a batch still running, and
    skipping it would submit (and pay for) its requests again.
    """


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
    #: the token that finds the batch at the provider when its create was cut short (an error after the
    #: batch was made, an interrupt): in the batch's metadata where the provider keeps metadata
    intent: str = ""
    #: the provider whose batch service holds it (``ModelProvider.batches``)
    provider: str = FIRST_PROVIDER

    def to_json(self) -> dict[str, Any]:
        """The entry as its file holds it; the provider only when not the first (older entries read, and
        are written, as they were)."""
        data = asdict(self)
        if data["provider"] == FIRST_PROVIDER:
            del data["provider"]
        return data


class Ledger:
    """The batches of one response cache, in ``<cache>/batches/``: one JSON file each, plus its requests.

    Entries are replaced atomically (``os.replace``), every one redacted
    (:func:`redact_keys`).
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
        text = json.dumps(entry.to_json(), indent=1, sort_keys=True)
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


def with_counts(entry: LedgerEntry, batch: Mapping[str, Any]) -> LedgerEntry:
    """``entry`` with the provider's latest status and request counts."""
    counts = {k: int(v or 0) for k, v in (batch.get("request_counts") or {}).items()}
    return replace(entry, status=str(batch.get("status")), counts=counts)
