"""The run's checks with models of their own: the calibration gate before the grid, the second-judge audit after.

Both run in the controller's process, on the parts it made over the plan
(``run/parts.py``), and add the calls of the models they make for
themselves (a fresh judge, the second judge) to the run's model calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pytest_restore.audit.calibration import CalibrationResult, calibrate
from pytest_restore.audit.judge_audit import JudgeAuditResult, audit_judge
from pytest_restore.exits import FAILED, os_cause
from pytest_restore.models.providers import close_model, make_model
from pytest_restore.record import Record
from pytest_restore.run.calls import ModelCalls, failed_count
from pytest_restore.run.parts import RunParts, call_detail
from pytest_restore.run.report import write_partial


class Console(Protocol):
    """Where a phase writes its lines: a terminal (pytest's ``TerminalWriter`` is one)."""

    def line(self, s: str = "", **markup: bool) -> None:
        """One line, with markup (``red=True``, ``bold=True``)."""

    def sep(self, sepchar: str, title: str | None = None, fullwidth: int | None = None, **markup: bool) -> None:
        """A separator line with a title."""


class RunStopped(Exception):
    """The run stops before its grid: ``str(err)`` is its one line (already said, or for the caller to say).

    ``code`` is the exit status; ``said`` whether the lines were printed already.
    """

    def __init__(self, line: str, code: int = FAILED, *, said: bool = False) -> None:
        super().__init__(line)
        self.code = code
        self.said = said


def calibration_gate(parts: RunParts, model_calls: ModelCalls, writer: Console) -> CalibrationResult:
    """The calibration gate (docs/PROTOCOL.md section 9): stop the run before the grid when it fails.

    The gate's result is returned (its JSON, ``calibration.json``, is written
    with the report, into the new report directory, never beside an old
    one), or written beside it, marked partial, when the gate fails and the run stops here
    (:class:`RunStopped`: a wrong key, an unreachable server or a full disk
    under the cache stop it in their one line, a missed threshold with the
    gate's reasons).
    """
    s = parts.settings
    providers = parts.plan.registries.providers
    fresh_judge = make_model(s.judge, "judge", s.model_options(parts.plan.cache_root), use_cache=False, providers=providers)
    try:
        result = calibrate(parts.audit(), fresh_judge=fresh_judge, seed=s.subset_seed)
    finally:
        close_model(fresh_judge)
    calibration_json = result.to_json()
    model_calls.side_calls[f"judge {s.judge} (calibration repeats)"] = call_detail(fresh_judge)
    fatal = parts.fatal_error()
    if fatal is not None:
        raise RunStopped(fatal, parts.fatal_exit_code())
    failed = model_calls.summarise_failures({"main": parts.call_details()})
    reasons = list(result.reasons)
    if failed:
        writer.sep("=", "model calls failed during the calibration gate", red=True, bold=True)
        for line in failed:
            writer.line(line, red=True)
        reasons.append(f"{sum(failed_count(d) for d in model_calls.all_details().values())} model calls failed")
    if reasons:
        try:
            where = write_partial(calibration_json, s.report_dir)
        except OSError as err:  # a full disk: the gate's verdict is still said, and still stops the run
            writer.line(f"partial report (calibration only) not written: {os_cause(err)}", yellow=True)
            where = None
        writer.sep("=", "calibration gate failed", red=True, bold=True)
        for reason in reasons:
            writer.line(reason, red=True)
        if where is not None:
            writer.line(f"partial report (calibration only): {where}")
        raise RunStopped("calibration gate failed: " + "; ".join(reasons), said=True)
    writer.line(
        f"calibration gate passed: judge self-consistency {result.judge_consistency:.2f}, "
        f"judge probes {result.probe_reference_correct}/{result.probe_reference} references CORRECT and "
        f"{result.probe_wrong_incorrect}/{result.probe_wrong} wrong answers INCORRECT, "
        f"oracle-answerable {result.oracle_answerable_rate:.2f}, "
        f"negative restore gain {result.negative_gain_rate:.2f}"
    )
    return result


def judge_audit(parts: RunParts, records: Sequence[Record], model_calls: ModelCalls) -> JudgeAuditResult:
    """Re-grade a stratified sample of recorded answers with the second judge."""
    s = parts.settings
    assert s.audit_judge is not None
    judge = make_model(s.audit_judge, "judge", s.model_options(parts.plan.cache_root), providers=parts.plan.registries.providers)
    try:
        questions = {q.question_id: q for q in parts.dataset().questions}
        result = audit_judge(records, questions, judge, s.prompt_set(), sample=s.audit_judge_sample, seed=s.subset_seed)
    finally:
        close_model(judge)
    model_calls.side_calls[f"judge {s.audit_judge} (judge audit)"] = call_detail(judge)
    return result
