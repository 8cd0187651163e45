"""The run core without pytest: a plan built once from a run's options, the settings never replaced, the options of a command line."""

from __future__ import annotations

import ast
import dataclasses
import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from grid_helpers import GRID, ROOT, small_args

from pytest_restore.data.dataset import LONGMEMEVAL_BUDGETS
from pytest_restore.data.locomo import LOCOMO_BUDGETS
from pytest_restore.report.inputs import RawCheck, RecordsError, RunInfo
from pytest_restore.run.checks import (
    CHECKS,
    Check,
    GridCoverage,
    MemorySystems,
    RealModelCalls,
    read_check,
)
from pytest_restore.run.options import OptionsError, parse_args
from pytest_restore.run.parts import RunParts
from pytest_restore.run.plan import build_plan, default_registries, long_lived
from pytest_restore.run.settings import RestoreSettings, SettingsError

LOCOMO_TINY = ROOT / "fixtures" / "locomo_tiny.json"


def plan_of(args: list[str], tmp_path: Path):  # type: ignore[no-untyped-def]
    raw, ignored = parse_args(args)
    assert ignored == []
    return build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None)


def test_the_plan_resolves_the_budgets_from_the_data_s_loader_once(tmp_path: Path) -> None:
    locomo = plan_of([f"--restore-data={LOCOMO_TINY}", "--restore-policies=fifo"], tmp_path)
    assert locomo.settings.budgets == LOCOMO_BUDGETS and locomo.settings.dataset is None
    assert [c.id for c in locomo.cells] == ["fifo-16k", "fifo-8k", "fifo-2k"]
    forced = plan_of([f"--restore-data={LOCOMO_TINY}", "--restore-dataset=locomo", "--restore-budgets=300,900"], tmp_path)
    assert forced.settings.budgets == (900, 300) and forced.settings.dataset == "locomo"
    embedded = plan_of([], tmp_path)
    assert embedded.settings.budgets == LONGMEMEVAL_BUDGETS
    assert embedded.data._dataset is None  # the embedded default's budgets are its loader's: nothing generated
    parts = RunParts(locomo, lambda _line: None)
    assert parts.settings is locomo.settings and parts.audit_config().budgets == LOCOMO_BUDGETS
    with pytest.raises(dataclasses.FrozenInstanceError):
        locomo.settings.budgets = (1,)  # type: ignore[misc]


def test_long_lived_data_is_built_with_the_collector_paused_and_it_runs_again_after() -> None:
    was = gc.isenabled()
    try:
        gc.enable()
        with long_lived():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(ValueError), long_lived():
            raise ValueError("a load that fails")
        assert gc.isenabled()  # on again after a failure too
        gc.disable()  # a caller that turned it off keeps it off
        with long_lived():
            pass
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_a_writer_model_is_another_model_than_the_reader(tmp_path: Path) -> None:
    named = plan_of(["--restore-writer-model=openai:small", "--restore-reader=openai:large"], tmp_path).settings
    assert (named.writer, named.writer_model) == ("openai:small", "openai:small") and named.uses_real_models
    for args in ([], ["--restore-writer-model=fake"]):  # the reader named again: the default run, the same id
        settings = plan_of(args, tmp_path).settings
        assert (settings.writer, settings.writer_model) == (None, "fake")
        assert settings.fingerprint(["fifo"], "data") == plan_of([], tmp_path).settings.fingerprint(["fifo"], "data")
    assert named.fingerprint(["fifo"], "data") != plan_of(["--restore-reader=openai:large"], tmp_path).settings.fingerprint(["fifo"], "data")


def test_the_plan_refuses_names_it_does_not_know_in_one_line(tmp_path: Path) -> None:
    cases = [
        (["--restore-policies=fifo,lru"], "--restore-policies: unknown policy 'lru'; registered: no-evict, fifo"),
        ([f"--restore-data={LOCOMO_TINY}", "--restore-dataset=nope"], "--restore-dataset: unknown dataset loader 'nope'"),
        (["--restore-dataset=locomo"], "--restore-dataset: names the loader of --restore-data, which is not given"),
        (["--restore-ranker=bm26"], "--restore-ranker: unknown ranker 'bm26'"),
        (["--restore-budgets=80k,80000"], "--restore-budgets: '80000' repeats '80k'"),
        (["--restore-writer-model=fake-strong"], "--restore-writer-model: 'fake-strong' is a reader only"),
        # each option lists what it takes: the writer no strong fake and no f1 judge, the reader both fakes
        (["--restore-writer-model=nope:model"], "--restore-writer-model: unknown model 'nope:model'; use 'fake' or 'openai:MODEL', 'anthropic:MODEL'"),
        (["--restore-reader=gpt-4o-mini"], "--restore-reader: unknown model 'gpt-4o-mini'; use 'fake', 'fake-strong' or 'openai:MODEL', 'anthropic:MODEL'"),
        (["--restore-judge=nope"], "--restore-judge: unknown model 'nope'; use 'fake' or 'openai:MODEL', 'anthropic:MODEL', 'f1:THRESHOLD'"),
    ]
    for args, said in cases:
        with pytest.raises(SettingsError) as err:
            plan_of(args, tmp_path)
        assert str(err.value).startswith(said), (args, str(err.value))
        assert "\n" not in str(err.value)
        assert ("f1:" in str(err.value)) == ("judge" in said), str(err.value)  # f1 is offered to a judge only


def test_a_command_line_s_options_are_the_audit_s_and_the_rest_is_named() -> None:
    raw, ignored = parse_args(["benches/", "-p", "no:xdist", "--restore-policies", "fifo", "--restore-ablations"])
    assert ignored == ["benches/", "-p", "no:xdist"]
    assert raw.values["policies"] == "fifo" and raw.ablations and raw.values["seeds"] == "0,1,2"
    with pytest.raises(OptionsError, match="--restore-polices: no such option"):
        parse_args(["--restore-polices=fifo"])


#: Where the package may build a ``RestoreSettings``: its one parse (every default resolved there).
BUILDS_SETTINGS = {"pytest_restore/run/settings.py"}


def settings_rebuilt(path: str, source: str) -> list[str]:
    """Where a module replaces a settings object (``dataclasses.replace(settings, ...)``, a setattr,
    a ``RestoreSettings(...)`` outside the parse)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        first = ast.unparse(node.args[0]) if node.args else ""
        if name == "replace" and "settings" in first or name == "__setattr__" and "settings" in first:
            found.append(f"{path} line {node.lineno}: {ast.unparse(node)[:60]}")
        if name == "RestoreSettings" and path not in BUILDS_SETTINGS:
            found.append(f"{path} line {node.lineno}: builds settings")
    return found


def test_no_settings_object_is_replaced_after_it_is_built() -> None:
    found = []
    for path in sorted((ROOT / "pytest_restore").rglob("*.py")):
        found += settings_rebuilt(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert found == []
    assert settings_rebuilt("x.py", "s = dataclasses.replace(self.settings, budgets=b)\n") == [
        "x.py line 1: dataclasses.replace(self.settings, budgets=b)"
    ]
    assert RestoreSettings.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_every_part_of_a_session_reads_the_one_settings_object(pytester: pytest.Pytester) -> None:
    # the data's budgets (none named) are in the settings from the start: the controller, its runner,
    # the parts and the plan hold the same object, whose budgets the grid was made from
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(
        """
        from pathlib import Path
        from pytest_restore.plugin.options import SESSION_KEY

        def pytest_collection_finish(session):
            role = session.config.stash[SESSION_KEY]
            same = role.settings is role.runner.settings is role.parts.settings is role.parts.plan.settings
            Path("same.txt").write_text(f"{same} {role.settings.budgets}")
        """
    )
    args = [a for a in small_args() if a not in ("--restore-budgets", "600,300,100")]
    result = pytester.runpytest_inprocess("-p", "no:xdist", "--collect-only", "-q", *args)
    assert result.ret == 0
    assert (pytester.path / "same.txt").read_text() == f"True {LONGMEMEVAL_BUDGETS}"


def test_checks_come_out_in_their_declared_order_and_read_back_typed() -> None:
    @dataclass(frozen=True)
    class Early(Check):  # a check is one class: its name, its place, its JSON form, its section
        name: ClassVar[str] = "zz_early"
        section: ClassVar[int] = 5
        when: ClassVar[Literal["before_grid", "after_grid"]] = "before_grid"
        figure: int

        @classmethod
        def from_json(cls, result: Any) -> Early:
            return cls(int(result["figure"]))

        def to_json(self) -> Any:
            return {"figure": self.figure}

        def render_md(self) -> str:
            return f"## Early\n\nfigure {self.figure}"

    grid = GridCoverage(("fifo-8k",), ("fifo-30k",))
    calls = RealModelCalls({"reader openai:m": {"failures": {"timeout": 1}, "concurrency": 2, "decoding": {}}})
    info = RunInfo(checks={"model_calls": calls, "zz_early": Early(3), "grid": grid})
    sections = info.check_sections()
    assert [s.splitlines()[0] for s in sections] == ["## Early", "## Grid coverage", "## Real model calls"]
    assert info.to_json()["checks"]["grid"] == {"result": {"ran": ["fifo-8k"], "not_run": ["fifo-30k"]}}
    back = RunInfo.from_json(info.to_json(), read_check)
    assert back.checks["grid"] == grid and back.checks["model_calls"] == calls
    assert back.checks["zz_early"] == RawCheck("zz_early", {"result": {"figure": 3}})  # not registered: kept as it was
    assert back.to_json() == info.to_json()
    assert len({c.name for c in CHECKS}) == len({c.section for c in CHECKS}) == len(CHECKS)


def test_a_check_entry_reads_back_from_its_first_form_and_a_broken_one_is_named() -> None:
    # the first files this section was written to: no budget, reader, ranker nor held tokens
    figures = {"stores": 2, "units": 40, "held": 9, "calls": {"fact extraction": 4}, "failed": {},
               "rejected": {"fact extraction": {"not valid JSON": 4}}, "events": {"ADD": 9}, "evicted": 0}
    first = {"result": {"cells": [{"cell": "mem0-30k", "policy": "mem0", "figures": figures}]}}
    check = read_check("memory_systems", first)
    assert isinstance(check, MemorySystems)
    (cell,) = check.cells
    assert (cell["budget"], cell["reader"], cell["ranker"], cell["figures"]["held_tokens"]) == (0, "", "", 0)
    section = check.render_md()
    assert "| mem0-30k | 2 | 40 | 9 | 0 | fact extraction 4 | none | fact extraction: 4 not valid JSON |" in section
    assert "every one of its 4 fact extraction calls rejected or failed" in section
    assert "never bound" not in section  # no budget known: nothing said of one
    # a cell without its id, or a result that is not an object: one line naming the check and the field
    broken = {"result": {"cells": [{"policy": "mem0", "figures": figures}]}}
    with pytest.raises(RecordsError, match=r"^run.checks.memory_systems: no field 'cell' where its result holds one$"):
        RunInfo.from_json({"checks": {"memory_systems": broken}}, read_check)
    with pytest.raises(RecordsError, match=r"^run.checks.grid is not an object$"):
        RunInfo.from_json({"checks": {"grid": ["fifo-8k"]}}, read_check)


def test_the_run_log_declares_every_key_a_run_writes(embedded_report: Path) -> None:
    # summary.json is typed: every key the main job's run wrote is declared (a new one must be)
    import json

    from pytest_restore.report.inputs import DataDescription, RunLogJSON, RunSection, settings_keys

    summary = json.loads((embedded_report / "summary.json").read_text(encoding="utf-8"))
    run = summary["run"]
    assert set(summary) <= set(RunLogJSON.__annotations__), set(summary) - set(RunLogJSON.__annotations__)
    assert set(run) <= set(RunSection.__annotations__)
    assert set(run["settings"]) <= settings_keys(), set(run["settings"]) - settings_keys()
    assert set(run["dataset"]) <= set(DataDescription.__annotations__), set(run["dataset"]) - set(DataDescription.__annotations__)
    assert {"settings", "dataset", "exclusions", "checks"} <= set(run) and run["checks"]["grid"]["result"]["ran"]


def test_the_data_a_cell_and_a_kept_message_are_frozen_once_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a session keeps to its end is frozen out of the collector's full passes: the parsed data, each
    cell's records and the audit's memos once the cell ran, each grid message's records once kept; each point
    once per process (a second run of the same cell in this process freezes nothing more)."""
    from pytest_restore.run import plan as plan_module
    from pytest_restore.run.cells import cell_message, run_cell
    from pytest_restore.run.session import GridMessages

    frozen: list[int] = []
    monkeypatch.setattr(plan_module, "_FROZEN", set())
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(gc.get_count()[0]))  # this test's process keeps its heap
    plan = plan_of([f"--restore-data={LOCOMO_TINY}", "--restore-policies=fifo", "--restore-budgets=2000"], tmp_path)
    parts = RunParts(plan, lambda _line: None)
    spec = plan.cells[0]
    run = run_cell(parts, spec, parts.audit())
    assert {"data", "prepared", f"cell {spec.id}"} <= plan_module._FROZEN
    before = len(frozen)
    assert run_cell(parts, spec, parts.audit()).records == run.records and len(frozen) == before
    GridMessages().receive(cell_message(parts, "gw0", spec, run), "test_grid.py::test_cell[fifo-2k]")
    assert "records test_grid.py::test_cell[fifo-2k]" in plan_module._FROZEN and len(frozen) == before + 1


def test_a_run_core_run_lets_go_of_what_an_earlier_run_in_the_process_froze(monkeypatch: pytest.MonkeyPatch) -> None:
    """A notebook that runs audits one after another: the next run's start thaws the earlier run's frozen points and
    collects the cycles they held; with nothing frozen before, a run's start collects nothing."""
    import weakref

    from pytest_restore.run import plan as plan_module

    class Node:
        """A cycle's link (a weak reference can name it)."""

        def __init__(self) -> None:
            self.other: Node | None = None

    monkeypatch.setattr(plan_module, "_FROZEN", set())
    gc.collect()
    gc.freeze()  # this test's process: only what it makes below is in the generations
    try:
        collected = gc.get_stats()[2]["collections"]
        plan_module.thaw_earlier_runs()
        assert gc.get_stats()[2]["collections"] == collected  # nothing frozen: no full collection
        first, second = Node(), Node()
        first.other, second.other = second, first  # a cycle the earlier run held (its audit, say) when it froze
        alive = weakref.ref(first)
        plan_module.freeze_long_lived("cell fifo-2k")
        del first, second  # then dropped, at its end
        assert alive() is not None and gc.get_freeze_count() > 0
        gc.collect()
        assert alive() is not None
        plan_module.thaw_earlier_runs()
        assert alive() is None and plan_module._FROZEN == set()
    finally:
        gc.unfreeze()
