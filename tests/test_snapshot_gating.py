"""A user's CI pins the audit's tables with the ``restore_snapshot`` fixture."""

from __future__ import annotations

import pytest
from grid_helpers import small_args

USER_TEST = """
def test_audit_tables(restore_snapshot):
    restore_snapshot.check()
"""

USER_POLICY = """
from pytest_restore.memory.eviction import VictimPolicy


class EvictLongest(VictimPolicy):
    name = "evict-longest"

    def choose_victim(self, stored, units):
        return {choice}(stored, key=lambda p: (units[p].tokens, -p))


def pytest_restore_register_policies(registry, config):
    registry.register(EvictLongest())
"""


def test_a_users_snapshot_pins_the_cells_and_a_policy_change_fails_with_a_diff(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(USER_POLICY.format(choice="max"))
    # in process, so named apart from this suite's own test modules (test_audit.py is one)
    pytester.makepyfile(test_users_audit=USER_TEST)
    args = ["-p", "no:xdist", "-p", "no:randomly", *small_args(), "--restore-policies", "fifo,evict-longest"]
    first = pytester.runpytest_inprocess(*args, "--snapshot-update")
    first.assert_outcomes(passed=1)
    stored = pytester.path / "__snapshots__" / "test_users_audit"
    cells = (stored / "test_audit_tables[cells].txt").read_text()
    assert cells.startswith("fifo-600-a fake  N: 7\n") and "evict-longest-600-b fake  two_bin_share: " in cells
    assert "| H1 | H1 fifo 600 | fake |" in (stored / "test_audit_tables[decisions].md").read_text()

    pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)  # unchanged: passes

    pytester.makeconftest(USER_POLICY.format(choice="min"))  # the policy now evicts the shortest unit
    changed = pytester.runpytest_inprocess(*args)
    changed.assert_outcomes(failed=1)
    out = changed.stdout.str()
    assert "restore cells table differs from its snapshot" in out
    # the diff names the cell and the figure that moved, each old value against its new one
    assert "- evict-longest-100-b fake  err: 7" in out and "+ evict-longest-100-b fake  err: 6" in out
    assert "- fifo-" not in out  # the policies that did not change are not in the diff
    changed_lines = [line for line in changed.outlines if line.startswith(("- ", "+ ")) and " | " not in line]
    assert changed_lines and all(" evict-longest-" in line and ": " in line for line in changed_lines)
    # the hint to accept it keeps the user's own options: a bare --snapshot-update would pin another grid
    assert f"accept the change with: pytest {' '.join(args)} --snapshot-update" in out
    assert "Traceback" not in out



def test_without_syrupys_plugin_restore_snapshot_fails_in_one_line_before_any_work(pytester: pytest.Pytester) -> None:
    # in process (named apart from this suite's test_audit.py): the session's own plugins are what counts,
    # whatever this process has imported
    pytester.makepyfile(test_users_audit=USER_TEST)
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:syrupy")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    line = ("restore_snapshot needs syrupy's pytest plugin, which this session does not load "
            "(-p no:syrupy, or plugin autoload off): drop -p no:syrupy or add -p syrupy")
    assert line in result.outlines  # the whole error, on a line of its own
    assert "fixture 'snapshot' not found" not in out and "Traceback" not in out
    assert "restore:" not in out and not (pytester.path / "restore-report").exists()  # no grid ran


def test_without_syrupy_installed_restore_snapshot_says_what_to_install(
    pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    from pytest_restore.plugin import snapshot_problem

    assert snapshot_problem(pytestconfig) is None  # installed, plugin loaded: this suite's own setting
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "syrupy" else real(name, *a))
    assert snapshot_problem(pytestconfig) == "restore_snapshot needs syrupy: pip install 'pytest-restore[snapshot]'"
