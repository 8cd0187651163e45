"""The plugin costs nothing in a session that is not an audit, and says what it does from the start."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from grid_helpers import (
    GRID,
    ChildRun,
    assert_progress_before_first_result,
    background_build,
    read_child,
    run_child,
    shared_run,
    small_args,
)

from pytest_restore.plugin import _is_grid_id, options

SMALL = small_args()

#: No test here reads a report's figure: the in-process runs build it and do not render it (conftest's
#: ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")

#: A conftest that writes down, as the session ends, which of the plugin's heavy modules were loaded.
MODULES_CONFTEST = """
import sys
from pathlib import Path

HEAVY = ("pytest_restore.plugin.session", "pytest_restore.audit", "pytest_restore.report", "numpy", "numba",
         "openai", "matplotlib", "syrupy")

def pytest_unconfigure(config):
    loaded = sorted(m for m in sys.modules if m.startswith(HEAVY))
    Path(config.rootpath, "loaded.txt").write_text("\\n".join(loaded))
"""


def test_an_unrelated_session_imports_and_writes_nothing_of_the_audit(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    assert 1 + 1 == 2\n")
    pytester.makeconftest(MODULES_CONFTEST)
    # syrupy's own entry point would load it in every session where it is installed (the extra's cost,
    # not ours): blocked, any syrupy module loaded would have come from this plugin
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:syrupy")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "loaded.txt").read_text() == ""
    assert not (pytester.path / ".pytest_cache" / "d" / "restore").exists()
    assert not (pytester.path / "restore-report").exists()
    assert "restore:" not in result.stdout.str()


def test_a_test_asking_for_restore_cell_starts_the_plugin_at_collection(pytester: pytest.Pytester) -> None:
    # no --restore-* option: the grid is found at collection and parametrized with the defaults
    pytester.makepyfile(test_grid=GRID, test_one="def test_one():\n    pass\n")
    pytester.makeconftest(MODULES_CONFTEST)
    result = pytester.runpytest_subprocess("-p", "no:xdist", "--collect-only", "-q")
    ids = [line for line in result.outlines if "test_cell[" in line]
    assert len(ids) == 6 * 3 and "test_grid.py::test_cell[fifo-80k]" in ids
    loaded = (pytester.path / "loaded.txt").read_text().split()
    assert "pytest_restore.plugin.session" in loaded
    # the audit's modules, but not numba: it loads with the first kernel a process runs (a cell, a profile)
    assert "numpy" in loaded and not any(m == "numba" or m.startswith("numba.") for m in loaded)


def test_a_bad_option_still_stops_the_run_at_configure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "--restore-budgets", "80k,,8k")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--restore-budgets*"])


def test_a_progress_line_comes_before_the_first_result(pytester: pytest.Pytester) -> None:
    # under xdist: test_plugin.py's controller test checks the same on its -n 2 run
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-v", *SMALL, "--restore-policies", "fifo")
    result.assert_outcomes(passed=3)
    assert_progress_before_first_result(result.outlines)


#: The README's command on the embedded default, with no ``--restore-*`` option, run in one project in turn:
#: first under xdist (the data is generated then), then with ``-n auto`` (it is in the project's cache by then,
#: as on a user's second run). One cell each (a part of the grid: its report is the partial one). The first
#: runs in a child pytest (its workers are processes anyway), with one worker (the controller's part, under
#: test, is the same for any number); the second, in one process, in the test's own
#: (``test_n_auto_runs_a_small_grid_found_in_the_given_paths_in_one_process``, on a copy of the project).
NO_OPTION_RUNS = {"xdist": ["-n", "1", "-v", "-k", "fifo-8k"]}
N_AUTO = ["test_grid.py", "-n", "auto", "-v", "-k", "fifo-8k"]


def _build_no_option_runs(project: Path) -> None:
    (project / "test_grid.py").write_text(GRID)
    prepared = project / ".pytest_cache" / "d" / "restore" / "prepared"
    for name, args in NO_OPTION_RUNS.items():
        run_child(args, project, project / name, name_report_dir=False)
        # what the project's prepared cache holds after this run (the next run adds to it)
        (project / f"{name}-prepared.txt").write_text("\n".join(sorted(p.name for p in prepared.glob("*"))))


background_build("no_option_runs", "no-option-runs", _build_no_option_runs)


@pytest.fixture(scope="module")
def no_option_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ChildRun]:
    """The ``NO_OPTION_RUNS``, run once per test run (also under xdist); each one's report, output and exit code."""
    project = shared_run(tmp_path_factory, "no-option-runs", _build_no_option_runs)
    return {name: read_child(project / name) for name in NO_OPTION_RUNS}


def test_an_xdist_controller_starts_the_plugin_from_its_workers_collection(no_option_runs: dict[str, ChildRun]) -> None:
    # no option: the controller, which collects nothing, learns of the grid from the workers,
    # prepares the embedded data once (saying so) and writes the report
    run = no_option_runs["xdist"]
    run.assert_passed(1)
    lines = run.output.splitlines()
    first_result = next(i for i, line in enumerate(lines) if "PASSED" in line)
    generating = next(i for i, line in enumerate(lines) if line.startswith("restore: generating the embedded"))
    # on this empty cache the controller counts the tokens once, for its workers, before they prepare
    counting = next(i for i, line in enumerate(lines) if line.startswith("restore: counting the o200k tokens of"))
    assert generating < counting < first_result
    prepared = (run.report.parent / "xdist-prepared.txt").read_text().split()  # as this run left the cache
    assert any(name.startswith("token-counts-") and name.endswith(".marshal") for name in prepared)
    assert (run.report / "cells.csv").read_text().count("fifo,8000,") == 2


def test_n_auto_runs_a_small_grid_found_in_the_given_paths_in_one_process(
    no_option_runs: dict[str, ChildRun], pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the README's command has no --restore-* option: the grid is found in the test files themselves
    project = no_option_runs["xdist"].report.parent
    for name in ("test_grid.py", ".pytest_cache"):  # the project as the xdist run left it, its cache filled
        (shutil.copytree if name.startswith(".") else shutil.copy)(project / name, pytester.path / name)
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)  # as in a child run: this process may be an xdist worker
    result = pytester.runpytest_inprocess(*N_AUTO)
    output = "\n".join(result.outlines + result.errlines)
    result.assert_outcomes(passed=1)
    assert "restore: -n auto: this small audit runs in one process" in output
    assert "[gw0]" not in output and "created:" not in output
    assert (pytester.path / "restore-report.partial" / "cells.csv").read_text().count("fifo,8000,") == 2


def test_paths_without_a_grid_leave_n_auto_to_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    assert not options.paths_hold_a_grid(pytester.parseconfig("test_one.py"))
    # a test suite that writes grid files for child runs names the fixture only in strings
    pytester.makepyfile(test_about="GRID = 'def test_cell(restore_cell):\\n    pass'\n\ndef test_x():\n    pass\n")
    assert not options.paths_hold_a_grid(pytester.parseconfig("."))
    pytester.makepyfile(test_grid=GRID)
    assert not options.paths_hold_a_grid(pytester.parseconfig("test_one.py"))
    assert options.paths_hold_a_grid(pytester.parseconfig("."))
    assert options.paths_hold_a_grid(pytester.parseconfig("test_grid.py::test_cell"))


def test_grid_ids_are_told_from_other_parametrized_ids() -> None:
    assert _is_grid_id("benches/test_grid.py::test_cell[fifo-80k]")
    assert _is_grid_id("t.py::test_cell[no-evict-8k-openai:gpt-5.4-mini]")
    assert _is_grid_id("t.py::test_cell[fifo-600]")
    assert not _is_grid_id("t.py::test_add[1]")
    assert not _is_grid_id("t.py::test_name[alice-bob]")
    assert not _is_grid_id("t.py::test_plain")


def test_the_light_options_module_keeps_the_bootstrap_seed_of_the_stats() -> None:
    from pytest_restore.run import options as declared
    from pytest_restore.stats.analysis import DEFAULT_SEED

    assert declared.DEFAULT_SEED == DEFAULT_SEED


def test_naming_an_openai_model_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from pytest_restore.models import providers

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openai" else real(name, *a))
    with pytest.raises(providers.ModelSpecError, match=r"^--restore-reader: openai:gpt-5.4-mini needs the openai "
                       r"package: pip install 'pytest-restore\[openai\]'$"):
        providers.check_spec("openai:gpt-5.4-mini", "--restore-reader")
    providers.check_spec("fake", "--restore-reader")  # the fake models need nothing more
