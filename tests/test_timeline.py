"""The run's timeline (``PYTEST_RESTORE_TIMELINE``): one line per phase when asked, nothing otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_restore.timeline import TIMELINE_ENV, mark, phase


def test_each_phase_is_one_line_with_its_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "timeline.jsonl"
    monkeypatch.setenv(TIMELINE_ENV, str(where))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    with phase("outer"):
        mark("inside")
    with pytest.raises(ValueError), phase("broken"):
        raise ValueError("the phase's own error goes on")
    lines = [json.loads(line) for line in where.read_text(encoding="utf-8").splitlines()]
    assert [line["name"] for line in lines] == ["inside", "outer", "broken"]
    inside, outer, broken = lines
    assert outer["start"] <= inside["start"] <= inside["end"] <= outer["end"]
    assert {line["process"] for line in lines} == {"gw3"}
    assert broken.get("raised") is True and "raised" not in outer
    assert all(line["cpu"] >= 0 for line in lines)


def test_nothing_is_written_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMELINE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with phase("quiet"):
        mark("quiet too")
    assert list(tmp_path.iterdir()) == []


def test_a_timeline_that_cannot_be_written_fails_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMELINE_ENV, str(tmp_path / "no such directory" / "timeline.jsonl"))
    with phase("unwritten"):
        value = 1
    assert value == 1
