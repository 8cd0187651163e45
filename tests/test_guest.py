"""What every library adapter shares (pytest_restore/libraries/guest.py): failures, loops, environment."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from pytest_restore.libraries.guest import (
    TELEMETRY_OFF,
    LibraryEndpoints,
    StoreLoop,
    guest_failure,
    library_version,
    quiet_environment,
    resolve_endpoints,
)

KEY = "sk-test-0123456789abcdefghijklmnop"


def test_a_library_failure_is_one_redacted_line_naming_library_question_and_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    err = RuntimeError(f"Error code: 500 - {{'error': 'bad key {KEY}'}}\n  File 'x.py', line 3\n    raise")
    failure = guest_failure("graphiti", "q-7", "add of unit 12", err)
    text = str(failure)
    assert "\n" not in text
    assert KEY not in text and KEY[:12] not in text
    assert text.startswith("memory library 'graphiti' on q-7: add of unit 12 failed: RuntimeError: Error code: 500")
    assert "[redacted]" in text


def test_an_exception_with_no_text_is_named_by_its_type() -> None:
    assert str(guest_failure("langmem", "q-1", "search", KeyError())).endswith("search failed: KeyError: KeyError")


def test_a_store_loop_runs_coroutines_in_order_and_stops_one_past_its_deadline() -> None:
    loop = StoreLoop("test")
    try:
        seen: list[int] = []

        async def note(n: int) -> int:
            seen.append(n)
            return n * 2

        assert [loop.run(note(n)) for n in range(3)] == [0, 2, 4]
        assert seen == [0, 1, 2]
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="no answer within 0.2 s"):
            loop.run(asyncio.sleep(30), deadline=0.2)
        assert time.monotonic() - started < 5
    finally:
        loop.close()
    assert loop.loop.is_closed()


def test_telemetry_is_switched_off_but_a_users_own_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TELEMETRY_OFF:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "0")
    quiet_environment()
    assert os.environ["GRAPHITI_TELEMETRY_ENABLED"] == "false"
    assert os.environ["MEM0_TELEMETRY"] == "False"
    assert os.environ["DO_NOT_TRACK"] == "0"


def test_endpoints_resolve_from_a_value_or_a_callable_and_versions_are_read() -> None:
    endpoints = LibraryEndpoints("http://127.0.0.1:1/v1", "token", "writer", "embedder", 8)
    assert resolve_endpoints(endpoints) is endpoints
    assert resolve_endpoints(lambda: endpoints) is endpoints
    assert library_version("pytest") == __import__("pytest").__version__
    assert library_version("no-such-distribution-here") == "not installed"
