"""What the tests that run the audit grid through pytester share."""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import fcntl
import io
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.record import Record
from pytest_restore.records_file import from_v1
from pytest_restore.report.inputs import RunSettings
from pytest_restore.settings import AuditSettings

ROOT = Path(__file__).resolve().parent.parent
#: The small hand-checkable dataset (seven evidence questions and one abstention question).
TINY = ROOT / "fixtures" / "tiny.json"
#: The grid module, as users write it: the project's own ``benches/test_grid.py``.
GRID = (ROOT / "benches" / "test_grid.py").read_text(encoding="utf-8")


#: The required fields of a record a test does not name (:func:`flat_record`).
RECORD_DEFAULTS: dict[str, Any] = {
    "question_type": "single-session-user",
    "policy": "fifo",
    "budget": 80_000,
    "seed": 0,
    "regime": "b",
    "reader": "fake",
    "oracle_correct": True,
    "policy_correct": True,
    "restored_correct": True,
    "negative_restore_gain": False,
    "gold_units": 1,
    "gold_evicted": 0,
    "bin": None,
    "excluded": None,
}


def flat_record(**fields: Any) -> Record:
    """A record from fields in the flat layout of schema version 1 (``policy_correct=False``), the
    required ones not named taken from :data:`RECORD_DEFAULTS`: the tests' shorthand, read through
    the same migration as a version-1 file."""
    return from_v1({**RECORD_DEFAULTS, **fields})


#: A conftest for child runs with real-model options: retry backoff in milliseconds, not seconds
#: (Retry-After is still honoured); put back when the run ends, for in-process runs.
FAST_RETRIES = """
from pytest_restore.models.managed import ManagedCalls

_DEFAULTS = dict(ManagedCalls.__init__.__kwdefaults__)
ManagedCalls.__init__.__kwdefaults__.update(backoff_base=0.01, backoff_cap=0.05)


def pytest_unconfigure(config):
    # an in-process run must not leave the fast backoff to the tests that run after it
    ManagedCalls.__init__.__kwdefaults__.update(_DEFAULTS)
"""


#: The smallest grid worth running: the tiny fixture, two policies, one budget.
SMALLEST_GRID = [
    f"--restore-data={TINY}",
    "--restore-budgets=300",
    "--restore-policies=fifo,no-evict",
    "--restore-bootstrap=200",
    "--restore-family-checks=report",
]


def small_args(*, bootstrap: int = 500, family_checks: str | None = "report") -> list[str]:
    """Options for a quick grid on the tiny fixture.

    Seven questions have no statistical power, so by default the families'
    expectations are reported rather than failing the run.
    """
    # ``=``: pytest picks its rootdir before plugin options are known, and would take a
    # separate PATH argument for a test path (and the project's rootdir for this run's)
    args = [f"--restore-data={TINY}", "--restore-budgets", "600,300,100", "--restore-bootstrap", str(bootstrap)]
    if family_checks is not None:
        args += ["--restore-family-checks", family_checks]
    return args


def report_file(path: Path) -> bytes:
    """A report file's bytes, summary.json without its provenance (each run's own id and start time)."""
    if path.name != "summary.json":
        return path.read_bytes()
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary.pop("provenance", None)
    return json.dumps(summary, indent=2, sort_keys=True).encode()


@dataclass(frozen=True)
class ChildRun:
    """What a child pytest left: its report directory, its exit code and its output."""

    report: Path
    ret: int
    output: str

    def assert_passed(self, passed: int) -> None:
        """Exit 0 (nothing failed or errored) with exactly ``passed`` tests passed."""
        assert self.ret == 0 and re.search(rf"\b{passed} passed\b", self.output), self.output[-3000:]


def assert_progress_before_first_result(lines: list[str]) -> None:
    """A ``restore: `` progress line comes before the first ``PASSED`` of a ``-v`` run's output."""
    first_result = next(i for i, line in enumerate(lines) if "PASSED" in line)
    progress = [i for i, line in enumerate(lines) if line.startswith("restore: ")]
    assert progress and progress[0] < first_result, "\n".join(lines)


#: What a thread building shared runs in the background holds (:func:`start_background_builds`).
_BACKGROUND = threading.local()
#: The child runs of the background builds still running: stopped when the session ends.
_BACKGROUND_CHILDREN: set[subprocess.Popen[str]] = set()


def child_env() -> dict[str, str]:
    """The environment of a child grid run: no xdist worker identity, no OpenAI settings leak in.

    A background build takes the environment as it was when its thread began: a test running
    meanwhile may have changed ``os.environ`` (a key, a proxy) for itself.
    """
    environ: Mapping[str, str] = getattr(_BACKGROUND, "environ", os.environ)
    return {k: v for k, v in environ.items() if not k.startswith(("OPENAI_", "PYTEST_XDIST"))}


def run_child(
    args: list[str], cwd: Path, report: Path, env: dict[str, str] | None = None, *, name_report_dir: bool = True
) -> ChildRun:
    """Run ``python -m pytest *args`` in ``cwd`` writing its report to ``report``; keep its output and exit code beside it.

    ``env`` adds to ``child_env()`` (an API key, say). ``name_report_dir=False``
    passes no ``--restore-report-dir`` (a run with no ``--restore-*`` option at
    all): the run writes ``cwd/restore-report`` (``cwd/restore-report.partial`` for a part of the
    grid), which is then moved to ``report``.
    """
    named = ["--restore-report-dir", str(report)] if name_report_dir else []
    with subprocess.Popen(
        [sys.executable, "-m", "pytest", *args, *named],
        cwd=cwd,
        env={**child_env(), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        background = getattr(_BACKGROUND, "environ", None) is not None
        if background:
            _BACKGROUND_CHILDREN.add(child)
        try:
            stdout, stderr = child.communicate(timeout=600)
        except BaseException:
            child.kill()
            raise
        finally:
            _BACKGROUND_CHILDREN.discard(child)
    result = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    output = result.stdout + result.stderr
    # a run of part of the grid (-k) writes its report beside the report directory, marked partial
    for written in ("restore-report", "restore-report.partial"):
        if not name_report_dir and (cwd / written).is_dir() and not report.exists():
            (cwd / written).rename(report)
    (report.parent / f"{report.name}-output.txt").write_text(output)
    (report.parent / f"{report.name}-exit-code.txt").write_text(str(result.returncode))
    return ChildRun(report, result.returncode, output)


def run_audit_here(args: list[str], cwd: Path, report: Path, env: dict[str, str] | None = None) -> ChildRun:
    """Run ``python -m pytest_restore run *args`` as this process's own call of the command, in ``cwd``, writing
    its report to ``report``; its output and exit code are kept beside it, as :func:`run_child` keeps them.

    For a shared run whose tests read only what the audit wrote (records, report, cache) and compare no
    terminal output of pytest's: the command writes pytest's files byte for byte (``test_cli_run.py``)
    without a child interpreter's start and imports. ``env`` is set for the call (no OpenAI settings
    and no xdist worker's identity otherwise, as in a child run). Not on a background build's thread:
    the call changes this process's working directory and environment while it runs.
    """
    from pytest_restore.__main__ import main

    assert getattr(_BACKGROUND, "environ", None) is None, "run_audit_here in a background build"
    saved, here = dict(os.environ), os.getcwd()
    out = io.StringIO()
    try:
        os.environ.clear()
        os.environ.update({**child_env(), **(env or {})})
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(["run", *args, "--restore-report-dir", str(report)])
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    (report.parent / f"{report.name}-output.txt").write_text(out.getvalue())
    (report.parent / f"{report.name}-exit-code.txt").write_text(str(code))
    return ChildRun(report, code, out.getvalue())


def read_child(report: Path) -> ChildRun:
    """The ``ChildRun`` that ``run_child`` left beside the report directory ``report``."""
    return ChildRun(
        report,
        int((report.parent / f"{report.name}-exit-code.txt").read_text()),
        (report.parent / f"{report.name}-output.txt").read_text(),
    )


def shared_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The directory ``name`` of this test run, filled by ``build`` once for every xdist worker.

    The first caller builds it under a file lock; later callers (other
    workers) wait for the lock and reuse what it left. A failed build leaves
    no ``done`` mark, so each caller that needs it tries again and fails
    with its own message.
    """
    out = _shared_run(tmp_path_factory, name, build, wait=True)
    assert out is not None
    return out


#: This process's xdist worker id (``None``: not a worker), read once as the session imports this module.
#: Not read again later: tests delete it from the environment (``project``) while a background build's
#: thread may be asking for the shared directory, which then became the worker's own and each worker
#: built the shared runs again (the main job, the tiny grid: about 20 CPU s of a suite).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory all xdist workers of this test run share (the session's own base directory without xdist)."""
    shared = tmp_path_factory.getbasetemp()
    return shared.parent if _WORKER else shared


def _shared_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object], *, wait: bool
) -> Path | None:
    """:func:`shared_run`; ``wait=False``: ``None`` at once when another caller holds the lock (is building it)."""
    shared = shared_dir(tmp_path_factory)
    out = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if not (out / "done").exists():
            out.mkdir(exist_ok=True)
            build(out)
            (out / "done").write_text("")
    return out


#: The shared runs built in the background as a session's tests start: the fixture that reads each,
#: and the run's name and build for :func:`shared_run` (registered by :func:`background_build`).
BACKGROUND_BUILDS: dict[str, tuple[str, Callable[[Path], object]]] = {}


def background_build(fixture: str, name: str, build: Callable[[Path], object]) -> Callable[[Path], object]:
    """Register ``build``, the shared run ``name`` that the fixture ``fixture`` reads, to start in the background.

    Only a build that runs child processes belongs here (:func:`run_child`,
    no server or model of this process): the thread that runs it shares the
    worker with the tests running meanwhile.
    """
    BACKGROUND_BUILDS[fixture] = (name, build)
    return build


def start_background_builds(
    tmp_path_factory: pytest.TempPathFactory, fixtures: set[str], first: int = 0
) -> threading.Thread:
    """Build, on a thread, the registered shared runs that the ``fixtures`` of this session read.

    A child run costs seconds to tens of seconds; started as the tests start,
    it is done (or under way) by the time a test asks for it, instead of one
    xdist worker building it while the other waits for it. ``first``: where
    in the list this thread starts (each worker its own), so two workers'
    threads build two runs at once; a run the other thread is building is
    left to it (:func:`shared_run`'s lock builds each once).
    A build that fails here leaves no ``done`` mark: the fixture builds it
    again and fails with its own message.
    """
    builds = [run for fixture, run in BACKGROUND_BUILDS.items() if fixture in fixtures]
    builds = builds[first % len(builds) :] + builds[: first % len(builds)] if builds else []
    environ = dict(os.environ)

    def build_all() -> None:
        _BACKGROUND.environ = environ
        for name, build in builds:  # one being built (by the other worker) is left to it
            try:
                _shared_run(tmp_path_factory, name, build, wait=False)
            except BaseException:  # noqa: BLE001, S112 - the fixture builds it again and says why
                continue

    thread = threading.Thread(target=build_all, name="shared-runs", daemon=True)
    thread.start()
    return thread


def stop_background_builds(thread: threading.Thread) -> None:
    """Stop the child runs a background build still waits on (a session that ended early: ``-x``)."""
    for child in list(_BACKGROUND_CHILDREN):
        child.kill()
    thread.join(timeout=30)


#: A full disk under some directories, as the process sees it: files and directories can still be
#: made there (a real full disk often has inodes left), but every write of bytes into a file under
#: them fails with ENOSPC. Source text, so a child run's conftest can hold it too (``full_disk`` runs it here).
FULL_DISK = '''
import builtins, errno, io, os

_CODE = [errno.ENOSPC]

def _full():
    return OSError(_CODE[0], os.strerror(_CODE[0]))

def full_disk_patches(*roots, code=errno.ENOSPC):
    """(object, attribute, replacement) for each write path: writes under ``roots`` fail with ``code`` (ENOSPC)."""
    _CODE[0] = code
    roots = tuple(os.path.realpath(str(r)) + os.sep for r in roots)
    under = lambda path: os.path.realpath(str(path)).startswith(roots)

    def fd_under(fd):
        try:
            return under(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False

    class Full:
        def __init__(self, handle):
            self._handle = handle
        def write(self, data):
            raise _full()
        def writelines(self, lines):
            raise _full()
        def __getattr__(self, name):
            return getattr(self._handle, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self._handle.close()
        def __iter__(self):
            return iter(self._handle)

    writing = lambda mode: any(c in mode for c in "wax+")
    real_write, real_fdopen, real_open = os.write, os.fdopen, io.open

    def write(fd, data):
        if data and fd_under(fd):
            raise _full()
        return real_write(fd, data)

    def fdopen(fd, mode="r", *args, **kwargs):
        handle = real_fdopen(fd, mode, *args, **kwargs)
        return Full(handle) if writing(mode) and fd_under(fd) else handle

    def open_(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if writing(mode) and (fd_under(file) if isinstance(file, int) else under(file)):
            return Full(handle)
        return handle

    return [(os, "write", write), (os, "fdopen", fdopen), (io, "open", open_), (builtins, "open", open_)]
'''


def full_disk(monkeypatch: pytest.MonkeyPatch, *roots: Path, code: int = errno.ENOSPC) -> None:
    """Make the disk under ``roots`` full for this test (see ``FULL_DISK``); ``errno.EROFS``: read-only."""
    namespace: dict[str, object] = {}
    exec(FULL_DISK, namespace)  # noqa: S102 - our own source text, shared with child runs
    patches = namespace["full_disk_patches"](*roots, code=code)  # type: ignore[operator]
    for obj, name, replacement in patches:
        monkeypatch.setattr(obj, name, replacement)


@contextlib.contextmanager
def hang_fails(seconds: float) -> Iterator[None]:
    """Meanwhile, a hang ends this process after ``seconds``, every thread's stack said on its standard error.

    The guard of an in-process run that could hang (a full disk under the run): as a child run's timeout
    fails its test, so this fails it (under xdist: the worker "crashed while running" it; with ``-n 0``:
    the session ends) where a hung run would hold the suite until CI's own limit. faulthandler's timer is
    a native thread: it fires with the interpreter's lock held by the hung code too.
    """
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def bootstrap_settings(bootstrap: int) -> RunSettings:
    """A report's settings: a default run's, with the bootstrap's resamples given."""
    import tempfile

    from pytest_restore.run.options import parse_args
    from pytest_restore.run.plan import build_plan, default_registries

    raw, _ = parse_args([f"--restore-bootstrap={bootstrap}"])
    settings = build_plan(raw, default_registries(), "helper", Path(tempfile.gettempdir()), lambda _line: None).settings
    shown = settings.to_json()
    return RunSettings(audit=AuditSettings.from_json(shown), keys=tuple(shown))


#: :func:`figures_not_rendered`'s stand-in for ``report.figure.write_figure``, as source text, so that a child
#: run's conftest can hold it too (:data:`FIGURES_NOT_RENDERED_CONFTEST`).
_BUILT_NOT_RENDERED = """
from pathlib import Path

from pytest_restore.report import figure


def built_not_rendered(findings, out_dir, **options):
    figure.draw_figure(findings, **options)  # a matplotlib Figure, not pyplot's: nothing to close
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / "figure.png", out / "figure.svg"
    png.write_bytes(b"")
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg"><title>not rendered</title></svg>\\n', encoding="utf-8")
    return png, svg
"""

#: A conftest for a child run that writes a report no test reads the figure of: the figure is built, not
#: rendered, for the whole run (:func:`figures_not_rendered`).
FIGURES_NOT_RENDERED_CONFTEST = _BUILT_NOT_RENDERED + "\nfigure.write_figure = built_not_rendered\n"


@contextlib.contextmanager
def figures_not_rendered() -> Iterator[None]:
    """Meanwhile, the reports written in this process build their figure but do not render it.

    Rendering figure.png (300 dpi) and figure.svg is most of a small grid's report: 0.5-1 s of CPU in a
    run of the tiny fixture. For the modules whose runs' point is elsewhere (a provider, a batch, a
    cache) and that read no figure: the figure is still built from the run's findings (``draw_figure``,
    where a name a user chose once crashed it), and its two files are placeholders. ``test_figure``,
    the report's tests and the shared runs (child processes) render it.
    """
    from pytest_restore.report import figure

    namespace: dict[str, object] = {}
    exec(_BUILT_NOT_RENDERED, namespace)  # noqa: S102 - our own source text, shared with child runs
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figure, "write_figure", namespace["built_not_rendered"])
        yield
