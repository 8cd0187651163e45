"""The token-count cache file: processes that prepare the same file at once never get a wrong count."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.data import tokens, units
from pytest_restore.data.dataset import Question, load_dataset
from pytest_restore.data.units import Granularity, build_histories, counts_file_name
from pytest_restore.synthetic.generator import generate, write_dataset

# One preparing process: waits for the go file, then builds the histories with an
# encoder that is slow (so that two processes overlap) and counts what it encodes.
WORKER = """
import json, sys, time
from pathlib import Path
from pytest_restore.data import tokens
from pytest_restore.data.dataset import Question, load_dataset
from pytest_restore.data.units import build_histories

data, counts_file, go, out = sys.argv[1:5]
real = tokens._count_text  # every text counted, by tiktoken or in Python
encoded = []

def slow(text):
    encoded.append(text)
    time.sleep(0.002)
    return real(text)

tokens._count_text = slow
questions = [q for q in load_dataset(data).questions if not q.is_abstention]
while not Path(go).exists():
    time.sleep(0.002)
histories = build_histories(questions, counts_file=counts_file)
Path(out).write_text(json.dumps({"encoded": len(encoded), "sizes": [h.sizes.tolist() for h in histories]}))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shared") / "data.json"
    write_dataset(generate(8, 5, tokens_per_history=5000), path)
    return path


def _fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_COUNTER", tokens.TokenCounter())


def _reference(data: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    _fresh_memo(monkeypatch)
    questions = _evidence(data)
    sizes = [h.sizes.tolist() for h in build_histories(questions)]
    _fresh_memo(monkeypatch)
    return sizes


def _evidence(data: Path) -> list[Question]:
    return [q for q in load_dataset(data).questions if not q.is_abstention]


def test_two_processes_on_a_cold_cache_agree_and_leave_one_counts_file(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _reference(data, monkeypatch)
    counts_file = tmp_path / "prepared" / counts_file_name("x" * 64, Granularity.TURN)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(data), str(counts_file), str(go), str(tmp_path / f"out{i}.json")], env=env)
        for i in range(2)
    ]
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    outs = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    assert [o["sizes"] for o in outs] == [reference, reference]
    assert sorted(p.name for p in counts_file.parent.iterdir()) == [counts_file.name]
    # a third process reads every count from the file: it encodes nothing (this one, with an empty memo
    # and an encoder that must not be asked: no third interpreter)
    _fresh_memo(monkeypatch)

    def no_encoding(*args: object) -> Any:
        raise AssertionError("the counts file should have made encoding unnecessary")

    monkeypatch.setattr(tokens, "_count_text", no_encoding)  # tiktoken's and the Python count alike
    assert [h.sizes.tolist() for h in build_histories(_evidence(data), counts_file=counts_file)] == reference


def test_a_damaged_counts_file_costs_time_not_counts(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _reference(data, monkeypatch)
    counts_file = tmp_path / counts_file_name("z" * 64, Granularity.TURN)
    questions = _evidence(data)
    for damage in (b"not marshal", marshal.dumps({"another text": 999})):
        counts_file.write_bytes(damage)
        assert [h.sizes.tolist() for h in build_histories(questions, counts_file=counts_file)] == reference
        assert units._read_counts(counts_file) is not None  # rewritten whole
        _fresh_memo(monkeypatch)
