"""report.html's data made in a fresh process (``run/page.py``): the same page, or made here when it cannot be."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from grid_helpers import TINY

from pytest_restore.data.loaders import DatasetRegistry, LongMemEval, default_datasets
from pytest_restore.record import Record
from pytest_restore.report.inputs import RunInfo, read_records, read_run_info
from pytest_restore.report.writer import PageMaker, write_report
from pytest_restore.run import page
from pytest_restore.run.page import page_maker
from pytest_restore.run.shared import pickled_records, records_text

RECORDS = Path(__file__).resolve().parent.parent / "fixtures" / "records-v2" / "records.jsonl"
FILES = ("records.jsonl", "cells.csv", "hypotheses.json", "report.md", "summary.json", "report.html")

needs_two_cores = pytest.mark.skipif(page._cores() < 2, reason="the page's process is for a second core")


def _written(tmp_path: Path, name: str, maker: PageMaker | None) -> dict[str, bytes]:
    records = read_records(RECORDS)
    info = read_run_info(RECORDS)
    out = tmp_path / name
    write_report(records, info, out, data_file=TINY, page=maker)
    return {f: (out / f).read_bytes() for f in FILES}


def _spied(maker: PageMaker, made: list[str | None]) -> PageMaker:
    """``maker``, each data it returns noted in ``made``."""

    def start(ordered: Sequence[Record], info: RunInfo) -> Callable[[], str | None]:
        result = maker(ordered, info)

        def noted() -> str | None:
            made.append(result())
            return made[-1]

        return noted

    return start


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The report with its page made in this process, written once: what each way of making it elsewhere must equal."""
    return _written(tmp_path_factory.mktemp("page"), "here", None)


@needs_two_cores
def test_the_page_made_in_its_process_is_the_page_made_here(tmp_path: Path, here: dict[str, bytes]) -> None:
    maker = page_maker(TINY, None, None, min_records=0)
    assert maker is not None
    made: list[str | None] = []
    apart = _written(tmp_path, "apart", _spied(maker, made))
    assert len(made) == 1 and made[0]  # the process made it
    assert apart == here
    assert made[0] in here["report.html"].decode("utf-8")  # texts from the data file included


@needs_two_cores
def test_the_workers_pickles_make_the_same_page(tmp_path: Path, here: dict[str, bytes]) -> None:
    # the records as xdist's workers send them: one pickle per cell, the cells arriving in any order
    records = read_records(RECORDS)
    third = len(records) // 3 + 1
    pickled = [pickled_records(records_text(records[i : i + third])) for i in reversed(range(0, len(records), third))]
    assert len(pickled) == 3
    maker = page_maker(TINY, None, None, min_records=0, pickled=pickled)
    assert maker is not None
    made: list[str | None] = []
    assert _written(tmp_path, "pickled", _spied(maker, made)) == here
    assert len(made) == 1 and made[0]  # the process made it, from the pickles


@needs_two_cores
def test_a_page_process_that_fails_leaves_the_page_to_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, here: dict[str, bytes]
) -> None:
    monkeypatch.setattr(page, "_CHILD", "raise SystemExit(3)")
    maker = page_maker(TINY, None, None, min_records=0)
    assert maker is not None
    made: list[str | None] = []
    assert _written(tmp_path, "failed", _spied(maker, made)) == here
    assert made == [None]


def test_what_does_not_pickle_leaves_the_page_to_this_process() -> None:
    import dataclasses

    info = read_run_info(RECORDS)
    assert info.settings is not None
    odd = dataclasses.replace(info, settings=dataclasses.replace(info.settings, extra={"hook": lambda: None}))
    started = page.PageProcess(read_records(RECORDS), odd, TINY, None)
    assert started.process is None and started.result() is None  # no process left waiting for its input


def test_a_small_report_one_core_or_a_conftests_loader_make_the_page_here(monkeypatch: pytest.MonkeyPatch) -> None:
    small = page_maker(TINY, default_datasets(), None, min_records=10**6)
    if small is not None:  # the process starts for a report of at least min_records records only
        assert small(read_records(RECORDS), read_run_info(RECORDS))() is None

    class Diary(LongMemEval):
        name = "diary"

    theirs = default_datasets()
    theirs.register(Diary())
    assert page_maker(TINY, theirs, None) is None  # a fresh process would not have the conftest's loader
    swapped = DatasetRegistry()
    for loader in (Diary(), *default_datasets().values()):
        swapped.register(loader)
    assert page_maker(TINY, swapped, None) is None
    monkeypatch.setattr(page, "_cores", lambda: 1)
    assert page_maker(TINY, None, None) is None
