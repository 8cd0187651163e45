"""Conventions a user meets first: item ids, the console script, ini keys, the dry run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from grid_helpers import GRID, shared_dir, small_args

from pytest_restore import __version__
from pytest_restore.__main__ import build_parser
from pytest_restore.models.providers import (
    CostLine,
    ModelSpecError,
    parse_price,
    price_of,
    render_cost,
)


def test_item_ids_say_budgets_as_the_report_does(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    args = ["-p", "no:xdist", "--collect-only", "-q", *small_args(), "--restore-budgets", "80k,8k"]
    eight = pytester.runpytest(*args, "-k", "8k")
    ids = [line for line in eight.outlines if "test_cell[" in line]
    assert ids and all(line.endswith("-8k]") for line in ids)
    both = pytester.runpytest(*args, "-k", "fifo and 8k")
    assert [line for line in both.outlines if "test_cell[" in line] == ["test_grid.py::test_cell[fifo-8k]"]


@pytest.mark.parametrize("verbosity", [[], ["-q"]], ids=["default", "quiet"])
def test_a_progress_line_starts_a_line_of_its_own_after_the_progress_letters(
    pytester: pytest.Pytester, verbosity: list[str]
) -> None:
    """A ``restore:`` line said between two items (a replica set aside, say) is a line of its own: under ``-q``
    (and under xdist, whose letters are written alike) a passed item's ``.`` leaves no file path for pytest's
    ``ensure_newline`` to end, and the line was glued to it (``.restore: replica ...``)."""
    pytester.makeconftest(
        "from pytest_restore.plugin.controller import say_on_terminal\n"
        "SEEN = []\n"
        "def pytest_configure(config):\n"
        "    SEEN.append(config)\n"
        "def pytest_runtest_logfinish(nodeid, location):\n"
        "    say_on_terminal(SEEN[0], 'after ' + nodeid.split('::')[-1])\n"
    )
    pytester.makepyfile(test_two="def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:randomly", *verbosity)
    assert result.ret == 0
    said = [line for line in result.outlines if "restore: after" in line]
    assert said == ["restore: after test_a", "restore: after test_b"], result.outlines


def test_version_and_help_name_the_console_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/venv/bin/pytest-restore"])
    parser = build_parser()
    assert parser.prog == "pytest-restore"
    assert parser.format_usage().startswith("usage: pytest-restore")
    monkeypatch.setattr(sys, "argv", ["/x/pytest_restore/__main__.py"])
    assert build_parser().prog == "python -m pytest_restore"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_restore", "--version"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == f"pytest-restore {__version__}"


@pytest.mark.parametrize(
    ("ini", "expected"),
    [
        ("restore_bootstrap = lots", "*ini key restore_bootstrap (tox.ini)*lots*"),
        ("restore_budgets = 80k,huge", "*ini key restore_budgets (tox.ini): 'huge' is not a whole number*"),
        ("restore_granularity = word", "*ini key restore_granularity (tox.ini): 'word' is not turn or session*"),
        ("restore_price = gpt-x=1", "*ini key restore_price*'gpt-x=1' is not MODEL=IN,OUT*"),
    ],
)
def test_ini_errors_name_the_ini_key(pytester: pytest.Pytester, ini: str, expected: str) -> None:
    pytester.makefile(".ini", tox=f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])


def test_ini_keys_are_typed_where_pytest_allows(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nrestore_bootstrap = 250\nrestore_equivalence_margin = 0.05\n")
    config = pytester.parseconfig()
    if tuple(int(x) for x in pytest.__version__.split(".")[:2]) >= (8, 4):
        assert config.getini("restore_bootstrap") == 250
        assert config.getini("restore_equivalence_margin") == 0.05


def test_prices() -> None:
    assert parse_price("openai:my-model=0.5,2") == ("openai:my-model", (0.5, 2.0))
    assert price_of("openai:my-model", dict([parse_price("openai:my-model=0.5,2")])) == (0.5, 2.0)
    assert price_of("openai:my-model", dict([parse_price("my-model=0.5,2")])) == (0.5, 2.0)
    with pytest.raises(ModelSpecError, match="MODEL=IN,OUT"):
        parse_price("my-model=0.5")
    table = {"gpt-4o-mini": (0.15, 0.60)}
    assert price_of("openai:gpt-4o-mini-2024-07-18", table) == (0.15, 0.60)
    assert price_of("openai:gpt-4o", table) is None
    assert price_of("fake", table) == (0.0, 0.0)
    lines = render_cost([CostLine("reader", "openai:gpt-4o-mini", 10, 0, 2_000_000, 1_000_000)])
    assert "0.90" in lines[1] and "at most $0.90" in lines[-1]
    unknown = render_cost([CostLine("reader", "openai:mystery", 10, 0, 1_000_000, 0), CostLine("judge", "fake", 10, 0, 9, 9)])
    # a sum that leaves a model out is no bound ("at most $0.00 plus ..." read as free)
    assert unknown[-1] == (
        "estimated cost of what is still to send: unknown, no price is known for openai:mystery "
        "(give --restore-price mystery=IN,OUT in USD per million input and output tokens)"
    )
    both = render_cost([*lines[1:0], CostLine("reader", "openai:gpt-4o-mini", 10, 0, 2_000_000, 1_000_000),
                        CostLine("judge", "openai:mystery", 10, 0, 1, 1)])
    assert both[-1].endswith("; the models with a price: at most $0.90")


# under xdist the controller plans the dry run: one worker is enough to have one
@pytest.mark.parametrize("workers", [["-p", "no:xdist"], ["-n", "1"]])
def test_dry_run_ends_with_a_plain_summary_and_exit_0(pytester: pytest.Pytester, workers: list[str]) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest_inprocess(
        *workers, *small_args(), "--restore-dry-run", "--restore-price", "fake=1,1"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["restore: dry run: planning the reader requests of * cells under fake (no model is called) ...",
         "restore: dry run: no-evict planned (1/* policies, * requests so far)",
         "*restore dry run*", "*est. USD*", "*estimated cost of what is still to send: at most $0.00*",
         "dry run: no model was called*"]
    )
    assert "!!!" not in result.stdout.str() and "Exit" not in result.stdout.str()
    assert not (pytester.path / "restore-report").exists()


def test_every_package_module_names_its_tests_in_the_tests_readme() -> None:
    """A newcomer finds a module's tests from ``tests/README.md``: every module has a row, every test module named exists."""
    tests = Path(__file__).resolve().parent
    package = tests.parent / "pytest_restore"
    rows = re.findall(r"^\| `pytest_restore/(\S+\.py)` \| (.+) \|$", (tests / "README.md").read_text(), re.MULTILINE)
    listed = {module for module, _ in rows}
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "__init__.py"}
    assert sorted(modules - listed) == [], "modules without a row in tests/README.md"
    assert sorted(m for m in listed if not (package / m).is_file()) == [], "rows for modules that do not exist"
    named = {name for _, cell in rows for name in re.findall(r"`(test_\w+\.py)`", cell)}
    assert named and sorted(n for n in named if not (tests / n).is_file()) == [], "test modules that do not exist"


def test_the_suite_s_shared_directory_holds_while_a_test_deletes_the_worker_id(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shared child runs (the main job, the tiny grid) are built once for all xdist workers, in the
    # directory they share; a worker's background build asks for it while tests on the main thread run
    # with PYTEST_XDIST_WORKER deleted (the project fixture). It once followed the environment there and
    # the worker built every shared run again in its own directory. Under xdist (the README's command).
    shared = shared_dir(tmp_path_factory)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert shared_dir(tmp_path_factory) == shared
