"""The audit in a user's own project: the grid the package ships, with the user's conftest.py.

No grid file is written here: the project holds only what a user writes (a
``conftest.py`` registering a policy), as after ``pip install pytest-restore``
in a directory of one's own. The wheel itself is built and installed in a
fresh virtualenv by hand (docs/CI.md says how); these runs are in process, cheap.
"""

from __future__ import annotations

import json

import pytest
from grid_helpers import SMALLEST_GRID

from pytest_restore.plugin.grid import GRID_NODE

USER_POLICY = """
from pytest_restore.memory.eviction import VictimPolicy


class EvictLongest(VictimPolicy):
    name = "evict-longest"

    def choose_victim(self, stored, units):
        return max(stored, key=lambda p: (units[p].tokens, -p))


def pytest_restore_register_policies(registry, config):
    registry.register(EvictLongest())
"""


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture
def own_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An empty project but for the user's conftest.py; no OpenAI settings leak in."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(USER_POLICY)
    return pytester


def test_restore_runs_the_shipped_grid_with_the_users_own_policy(own_project: pytest.Pytester) -> None:
    """The shipped grid runs where nothing was collected, on ``--restore`` or on any audit option alone: the
    issue-30 case (``pytest --restore-...`` in a directory with no test collected 0 items and exited 5)."""
    args = [*SMALLEST_GRID, "--restore-policies=fifo,evict-longest", "-p", "no:xdist", "-v"]
    result = own_project.runpytest_inprocess(*args)  # audit options, no --restore
    assert result.ret == 0, result.outlines[-20:]
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"{GRID_NODE}::test_cell[[]fifo-300[]] PASSED*", f"{GRID_NODE}::test_cell[[]evict-longest-300[]] PASSED*"])
    summary = json.loads((own_project.path / "restore-report" / "summary.json").read_text())
    assert summary["run"]["checks"]["grid"]["result"] == {"ran": ["fifo-300", "evict-longest-300"], "not_run": []}
    assert "| evict-longest |" in (own_project.path / "restore-report" / "report.md").read_text()
    # -k selects among the shipped grid's items as among a grid file's
    part = own_project.runpytest_inprocess("--restore", *args, "-k", "longest")
    part.assert_outcomes(passed=1)
    part.stdout.fnmatch_lines(["*PART OF THE GRID (1 of 2 cells)*"])


def test_a_registered_policy_joins_the_default_grid_by_the_one_rule_and_the_terminal_says_so(
    own_project: pytest.Pytester,
) -> None:
    # a memory system of derived memories beside the eviction policy: it waits to be named, as the built-in ones do
    own_project.makeconftest(
        USER_POLICY
        + """
from pytest_restore.memory.memories import Memory
from pytest_restore.memory.systems import MemorySystem


class KeepFirst(MemorySystem):
    name = "keep-first"

    def reset(self, budget, ctx):
        self.held = []

    def add(self, unit):
        self.held = self.held or [Memory.of(unit)]

    def memories(self):
        return list(self.held)


def pytest_restore_register_policies(registry, config):
    registry.register(EvictLongest())
    registry.register(KeepFirst())
"""
    )
    grid = [arg for arg in SMALLEST_GRID if not arg.startswith("--restore-policies")]
    result = own_project.runpytest_inprocess("--restore", *grid, "-p", "no:xdist", "--collect-only", "-q")
    assert result.ret == 0, result.outlines[-20:]
    result.stdout.fnmatch_lines(
        [
            (
                "restore: registered policy evict-longest joins the grid: every eviction policy runs unless "
                "--restore-policies names the grid's"
            ),
            (
                "restore: registered memory system keep-first is not in the grid: a memory system runs when "
                "--restore-policies names it"
            ),
        ]
    )
    cells = [line.split("[")[1].rstrip("]") for line in result.outlines if "test_cell[" in line]
    assert cells == [f"{p}-300" for p in ("no-evict", "fifo", "random", "redundancy", "llm-importance", "control", "evict-longest")]
    named = own_project.runpytest_inprocess("--restore", *SMALLEST_GRID, "-p", "no:xdist", "--collect-only", "-q")
    assert "registered" not in named.stdout.str()  # the user chose the grid: nothing to say


def test_a_session_that_is_no_audit_gets_no_grid(own_project: pytest.Pytester) -> None:
    """The plugin stays out of an unrelated session: nothing collected stays nothing, a test stays one test."""
    empty = own_project.runpytest_inprocess("-p", "no:xdist")
    assert empty.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    own_project.makepyfile(test_mine="def test_mine():\n    assert True\n")
    mine = own_project.runpytest_inprocess("-p", "no:xdist")
    mine.assert_outcomes(passed=1)
    assert GRID_NODE not in mine.stdout.str() and not (own_project.path / "restore-report").exists()


def test_a_project_with_its_own_grid_module_gets_no_second_grid(own_project: pytest.Pytester) -> None:
    own_project.makepyfile(test_grid="from pytest_restore.plugin.grid import test_cell  # noqa: F401\n")
    result = own_project.runpytest_inprocess("--restore", *SMALLEST_GRID, "-p", "no:xdist", "-v")
    result.assert_outcomes(passed=2)
    assert GRID_NODE not in result.stdout.str()
