"""How each installed memory library fails: one line naming the library and the question, and the earlier report kept.

Four ways a library fails, for every library of the libraries' table that is
installed here (cognee's are in ``test_cognee.py``: it configures itself once
per process): it cannot be imported, something raises inside it (here its
model calls, answered 502 by a gateway whose writer is down), every answer
it gets is malformed (counted, and the line the run fails such a cell with),
and its store grows past the budget (the adapter's deletes undone). Each is
held to three turns through a gateway over the fake writer. The last test
runs a grid with every installed library failing inside: each cell fails in
one line and the complete report an earlier run left is kept.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from grid_helpers import GRID, small_args

from pytest_restore.data.units import Unit
from pytest_restore.libraries.guest import GuestFailure, LibraryEndpoints
from pytest_restore.libraries.registry import LIBRARIES, Library
from pytest_restore.libraries.system import LibrarySystem
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.systems import MemorySystemError
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake_writer import FakeWriter
from pytest_restore.models.gateway import Gateway
from pytest_restore.report.checks import unused_calls

#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


DIMS = 64
#: every library of the table but cognee (one configuration per process: its own module tests it)
HERE = [library for library in LIBRARIES if library.name != "cognee"]
UNITS = [
    Unit(i, 0, i, f"2024/01/0{i + 1} (Mon) 10:00", "Ines", text, f"Ines: {text}", 10)
    for i, text in enumerate([
        "I keep a red bicycle in the garage at home.",
        "My garden has seven tomato plants this year.",
        "Paula visits next weekend from Lisbon by train.",
    ])
]


def installed(libraries: Sequence[Library]) -> list[object]:
    """The libraries as parameters, each skipped (saying why) where it is not installed."""
    return [pytest.param(lib, id=lib.name, marks=pytest.mark.skipif(lib.missing() is not None, reason=str(lib.missing())))
            for lib in libraries]


def system_of(library: Library, endpoints: LibraryEndpoints) -> LibrarySystem:
    """The library's memory system, its calls to ``endpoints``."""
    module, _, name = library.policy.partition(":")
    system: LibrarySystem = getattr(importlib.import_module(module), name)(endpoints)
    return system


def endpoints_of(gateway: Gateway) -> LibraryEndpoints:
    return LibraryEndpoints(gateway.base_url, gateway.token, gateway.chat_name, gateway.embedding_name, DIMS)


class DownWriter(FakeWriter):
    """A writer whose every call fails (the gateway answers 502, telling the client not to retry)."""

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return [ChatResult(None, error="the writer is down (a test's)") for _ in requests]


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with Gateway(FakeWriter(), FakeEmbedder(DIMS), chat_name="fake", embedding_name="fake") as running:
        yield running


def one_line(err: BaseException, library: Library, question: str) -> str:
    """The failure's text, checked to be one line naming the library and the question."""
    line = str(err)
    assert "\n" not in line and line.startswith((f"memory library {library.name!r} on {question}: ",
                                                 f"memory system {library.name!r} on {question} ")), line
    return line


@pytest.mark.parametrize("library", installed(HERE))
def test_a_library_that_cannot_be_imported_is_one_line_with_its_install_line(
    library: Library, gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = system_of(library, endpoints_of(gateway))
    adapter = sys.modules[type(system).__module__]
    loaded = getattr(adapter, "_graphiti", None)
    if loaded is not None:  # graphiti's import is cached per process: cleared now, and again after the undo
        loaded.cache_clear()
    if hasattr(adapter, "_LOADED"):
        monkeypatch.setattr(adapter, "_LOADED", [])
    monkeypatch.setitem(sys.modules, library.module, None)  # as if it were not installed
    try:
        with pytest.raises(GuestFailure) as failed:
            system.reset(100, EvictionContext(question_id="q-import"))
    finally:
        monkeypatch.undo()
        if loaded is not None:
            loaded.cache_clear()
    line = one_line(failed.value, library, "q-import")
    assert isinstance(failed.value, ImportError) and f"pip install 'pytest-restore[{library.extra}]'" in line
    assert line.startswith(f"memory library {library.name!r} on q-import: import failed: ImportError: ")


@pytest.mark.parametrize("library", installed(HERE))
def test_an_exception_inside_a_library_is_one_line_naming_the_question_and_the_unit(library: Library) -> None:
    with Gateway(DownWriter(), FakeEmbedder(DIMS), chat_name="down", embedding_name="fake") as down:
        system = system_of(library, endpoints_of(down))
        with pytest.raises(GuestFailure) as failed:
            system.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="q-inside"))
    line = one_line(failed.value, library, "q-inside")
    assert re.search(r"(unit 0|add on unit 0|add of unit 0) failed: \w+", line), line
    assert down.token not in line


@pytest.mark.parametrize("library", installed(HERE))
def test_answers_a_library_rejects_are_counted_and_a_store_that_used_none_is_said_in_one_line(library: Library) -> None:
    """Every answer malformed: the library goes on (it drops them), each is counted by its kind and cause, and
    the store's figures give the line the run fails such a cell with (``report.checks.unused_calls``)."""
    with Gateway(FakeWriter(malformed=1.0), FakeEmbedder(DIMS), chat_name="fake-malformed", embedding_name="fake") as bad:
        system = system_of(library, endpoints_of(bad))
        system.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="q-rejected"))
    figures = system.figures()
    assert figures.rejected and figures.library.startswith(f"{library.distribution} ")
    [line, *_] = unused_calls(figures.to_json())
    assert re.fullmatch(r"every one of its \d+ [\w ]+ calls rejected or failed", line), line


@pytest.mark.parametrize("library", installed(HERE))
def test_a_store_past_its_budget_is_one_line_naming_the_library_and_the_question(
    library: Library, gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library whose deletes did nothing (its store grows past any budget): stopped after the turn that
    took it over, in one line."""
    system = system_of(library, endpoints_of(gateway))
    monkeypatch.setattr(type(system), "delete_oldest", lambda self, unit: None)
    with pytest.raises(MemorySystemError) as failed:
        system.hold(UNITS, np.full(3, 10), 5, EvictionContext(question_id="q-budget"))
    line = one_line(failed.value, library, "q-budget")
    assert re.fullmatch(rf"memory system {library.name!r} on q-budget after unit \d arrived: holds \d+ tokens, over its budget of 5", line)


#: A conftest registering every installed library with its calls to a port nothing listens on.
DOWN_CONFTEST = '''
from pytest_restore.libraries.guest import LibraryEndpoints
from pytest_restore.libraries.registry import LIBRARIES

DEAD = LibraryEndpoints("http://127.0.0.1:9/v1", "sk-dead-0123456789abcdef", "m", "e", 64)


def pytest_restore_register_policies(registry, config):
    import importlib

    for name in {names!r}:
        library = next(lib for lib in LIBRARIES if lib.name == name)
        module, _, cls = library.policy.partition(":")
        registry.register(getattr(importlib.import_module(module), cls)(DEAD))
'''


def test_a_grid_whose_libraries_fail_inside_says_so_in_a_line_each_and_keeps_the_earlier_report(
    pytester: pytest.Pytester,
) -> None:
    names = [lib.name for lib in HERE if lib.missing() is None]
    if not names:
        pytest.skip("no memory library is installed")
    earlier = pytester.path / "restore-report"
    earlier.mkdir()
    (earlier / "report.md").write_text("the earlier report")
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(DOWN_CONFTEST.format(names=names))
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", *small_args(bootstrap=200), "--restore-budgets", "300", "--restore-policies", ",".join(["fifo", *names]),
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    result.assert_outcomes(failed=len(names), passed=1)
    for name in names:
        assert re.search(rf"^memory library {name!r} on \S+: \S.* failed: \w+", out, re.MULTILINE), (name, out[-3000:])
    assert "Traceback" not in out and "sk-dead" not in out
    assert (earlier / "report.md").read_text() == "the earlier report"  # kept: this run's report is partial
    assert (pytester.path / "restore-report.partial" / "report.md").is_file()


def test_the_cases_cover_every_library_of_the_table_but_cognee() -> None:
    assert {lib.name for lib in HERE} | {"cognee"} == {lib.name for lib in LIBRARIES}
    assert Path(__file__).with_name("test_cognee.py").is_file()  # cognee's import and inside failures
