"""Shared fixtures: the grids run in a child pytest, each run once per test run.

A grid in a child pytest costs seconds to tens of seconds, so the tests that
read the same run's outputs share it. Under xdist every worker has its own
session; ``shared_run`` puts a run in the directory all workers of this test
run share and builds it under a file lock, so the first worker to ask runs it
and the others read its outputs.
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

#: The directory of the two locks, ``configure`` and ``collect``, by which the first xdist worker to start compiles
#: the bytecode alone: its path reaches the workers (and no one else) in this environment variable.
START_LOCKS = "RESTORE_TESTS_START_LOCKS"
#: A worker's hold on those locks: ``lead`` (the first worker: the locks it holds) or ``follow`` (the others).
_START: dict[str, Any] = {}


def _hold_shared(lock: IO[str], deadline: float = 120.0) -> None:
    """Wait until no process holds ``lock`` alone (or ``deadline`` seconds pass: then go on without it)."""
    give_up = time.monotonic() + deadline
    while time.monotonic() < give_up:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            time.sleep(0.05)
        else:
            fcntl.flock(lock, fcntl.LOCK_UN)
            return


def _first_worker_alone() -> None:
    """Under xdist, let the first worker compile the package's and the tests' bytecode while the others wait.

    A clean checkout has no bytecode: pytest rewrites the asserts of the package (its plugin's distribution) and of
    the test modules, and writes the result beside them. The workers start together, and each rewrote and compiled
    the same some 220 modules for itself: about 5 CPU s a worker (a collection on a clean clone 12.4 CPU s, again
    7.5). The first worker holds ``configure`` through this module's imports and its ``pytest_configure``, and
    ``collect`` through its collection; the others wait for each before they do the same, and read its bytecode.
    """
    where = os.environ.pop(START_LOCKS, None)
    if not where or not Path(where).is_dir():
        return
    # held open as long as the lock they carry is held
    configure, collect = (open(Path(where) / name, "a") for name in ("configure", "collect"))  # noqa: SIM115
    try:
        fcntl.flock(configure, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # one first worker per run: a late one that finds the lock free finds this file made
        os.close(os.open(Path(where) / "first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except OSError:  # BlockingIOError: another holds it; FileExistsError: another was first
        fcntl.flock(configure, fcntl.LOCK_UN)
        _hold_shared(configure)
        configure.close()
        _START["follow"] = collect
        return
    fcntl.flock(collect, fcntl.LOCK_EX)  # no other worker asks for it before ``configure`` is free
    _START["lead"] = {"configure": configure, "collect": collect}


def _let_others(phase: str) -> None:
    """The first worker is done with ``phase``: the others may go on with it."""
    lock = _START.get("lead", {}).pop(phase, None)
    if lock is not None:
        lock.close()  # and with it the lock


# before the package's modules and the grid helpers are imported, for their bytecode
_first_worker_alone()

from grid_helpers import (
    BACKGROUND_BUILDS,
    FAST_RETRIES,
    FIGURES_NOT_RENDERED_CONFTEST,
    GRID,
    ROOT,
    TINY,
    ChildRun,
    background_build,
    figures_not_rendered,
    read_child,
    run_child,
    shared_dir,
    shared_run,
    small_args,
    start_background_builds,
    stop_background_builds,
)

from pytest_restore.record import Record
from pytest_restore.report.inputs import read_records
from pytest_restore.synthetic.embedded import embedded_dataset

# The suite starts some fifty Python processes (the xdist workers, the child grid runs) that import
# the same modules, the package's own among them, which pytest rewrites for its assertions. Where the
# environment forbids bytecode files (PYTHONDONTWRITEBYTECODE=1, as some CI images set), each of them
# parses and compiles every one of those modules again: 0.45 s of CPU a child grid run, measured on
# the tiny grid. The processes this session starts keep Python's default and cache their bytecode.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The langmem extra (in dev) brings langsmith, which registers a pytest plugin that every pytest
# process loads: 0.8 CPU s of imports (pydantic models, requests) a process. pyproject's addopts
# blocks it in this suite's own processes, but a child grid run in a project of its own (a pytester
# directory, a temporary project) reads no pyproject of ours: the environment carries the option to
# them, ~0.65 CPU s less for each tiny child grid (4 runs each way, load 6-8). pytester removes
# PYTEST_ADDOPTS from the environment of its tests, so ``pytest_runtest_call`` puts it back there.
_NO_LANGSMITH = "-p no:langsmith_plugin"


def _block_langsmith_in_children() -> str | None:
    """Add ``-p no:langsmith_plugin`` to ``PYTEST_ADDOPTS``; return the value it had (``None``: unset)."""
    before = os.environ.get("PYTEST_ADDOPTS")
    if _NO_LANGSMITH not in (before or ""):
        os.environ["PYTEST_ADDOPTS"] = f"{before} {_NO_LANGSMITH}" if before else _NO_LANGSMITH
    return before


_block_langsmith_in_children()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """The child runs a test starts block langsmith's plugin too, pytester's tests included (above)."""
    before = _block_langsmith_in_children()
    try:
        return (yield)
    finally:
        if before is None:
            os.environ.pop("PYTEST_ADDOPTS", None)
        else:
            os.environ["PYTEST_ADDOPTS"] = before

#: The lock an xdist controller holds while ``warm_kernels.py`` compiles the package's numba kernels
#: into their disk cache; its path reaches the workers (and no one else) in this environment variable.
KERNELS_LOCK = "RESTORE_TESTS_KERNELS_LOCK"
#: The controller's warm-up: its process and its scratch directory (lock, log, response cache).
_WARM: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Load what in-process runs need before the first of them, in a process that runs tests.

    An xdist controller runs none: it starts its workers without this (1.7 s of imports), and
    starts compiling the kernels for them (:func:`_warm_kernels`).
    """
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _warm_kernels(config)
        return
    # A suite started as a background job (``cmd &`` in a script) inherits Ctrl-C ignored, and Python
    # leaves it so: the tests that send their own process a Ctrl-C (test_batch) need Python's handler,
    # and the child runs the tests start inherit it (a handler set here is the default in a child).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # The plugin imports its session (and numpy) only once a run is an audit. pytester's in-process
    # runs drop the modules first imported inside them, and numpy cannot be imported twice in one
    # process: load it here, in the outer session, as the plugin did at load time before. Likewise the
    # report's figure and page (matplotlib, its SVG backend, PIL's PNG writer): an in-process run that
    # writes a report would otherwise import them afresh, ~0.6 s of CPU each time.
    for _module in (
        "pytest_restore.plugin.session",
        "pytest_restore.report.figure",
        "pytest_restore.report.html",
        "pytest_restore.report.story",
        "matplotlib.backends.backend_svg",
        "PIL.PngImagePlugin",
    ):
        importlib.import_module(_module)
    # The OpenAI client's HTTP stack likewise: httpx2 maps httpcore2's errors to its own through a
    # table it fills on the first error, with the httpcore2 classes of that moment. Were httpcore2
    # first imported inside an in-process run, the run would drop it, a later run would import it
    # again, and its connection errors (new classes) would no longer match the table: they escape
    # the client as httpcore2.ConnectError, not openai.APIConnectionError (test_batch's unreachable
    # batch API failed so under -n whenever an earlier in-process run had opened a client first).
    for _module in ("openai", "httpx2", "httpcore2", "httpx", "httpcore"):
        try:
            importlib.import_module(_module)
        except ImportError:  # the openai extra is not installed: no test here opens its client
            pass

    # A worker holds a large heap (the imports, the module fixtures' data) and allocates fast: at
    # Python's default thresholds the two workers made 45 full collections of it, 13.8 s of CPU with
    # the younger generations' (measured with gc.callbacks); collecting the youngest generation every
    # 20k allocations rather than every 700, 3 full collections and 4.6 s. Child runs keep the defaults.
    gc.set_threshold(20_000, 10, 10)
    _let_others("configure")


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    """A worker other than the first collects once the first has (:func:`_first_worker_alone`)."""
    follow = _START.pop("follow", None)
    if follow is not None:
        with follow:
            _hold_shared(follow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Make numba's first compiled call once the controller's kernel warm-up has ended, before any test runs.

    numba imports its typing registries on the first compiled call. That call is made here, before pytester's
    in-process runs snapshot sys.modules: a registry imported inside such a run is dropped when the snapshot is
    restored, and importing it again later fails with "cannot augment Function(...)". It comes after the warm-up
    (:func:`_wait_for_kernels`), which compiles the kernel it calls: made in ``pytest_configure``, before the wait,
    each worker of a clean checkout compiled it for itself beside the warm-up, 0.6 CPU s each. The shared child
    runs start after this too (``shared_runs_in_background``): they load the kernels, not compile them.
    """
    _let_others("collect")
    _wait_for_kernels()
    # imported here, not with this module: an xdist controller, which runs no kernel, imports numba no more (0.4 CPU s)
    from pytest_restore.memory import kernels

    kernels.fact_counts("warm up")
    # That call may be served from numba's disk cache (the warm-up or another worker compiled it first), which
    # imports none of the compiler's lazily imported modules: numba.core.boxing, imported on the first real
    # compile, would then be imported inside an in-process run, dropped with it, and registering its boxers
    # again on the next compile fails ("duplicate registration for ... Boolean"). So compile one function for
    # real here, whatever the disk cache holds, and import boxing by name.
    import numba.core.boxing  # noqa: F401
    import numpy as np
    from numba import njit

    njit(cache=False)(lambda values, flag: values.sum() if flag else 0.0)(np.zeros(2), True)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` runs this suite on one worker more than xdist's own count (the machine's CPUs).

    Many of its tests wait rather than compute: on a loopback server's latency or a timeout, on a child
    run (a process of its own), on a kill. With a worker per CPU, the 2-core machine's CPUs stood idle
    a tenth of the time (user+sys CPU over twice the wall time: 1.79); a third worker fills it. Adjacent
    clean-clone runs, ``-n 2`` against ``-n 3``: 154.6 s / 145.3 s, 179.2 s / 168.4 s, 170.9 s / 154.2 s,
    for the same CPU time. ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the number where it is set.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook answers with it
    # only xdist calls this hook, so its plugin is there to ask
    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_count

    return xdist_count(config) + 1


def _warm_kernels(config: pytest.Config) -> None:
    """Compile the kernels once, in a process of their own, while the workers start.

    A clean checkout has no compiled kernels on disk, and the workers and the
    shared child runs start together: each compiled the same kernels for itself,
    about 10 s of the suite's CPU (paired clean-clone runs). The workers wait for this process
    under :data:`KERNELS_LOCK` (:func:`_wait_for_kernels`) before their first
    test; the children they start then find the kernels compiled. A failed
    warm-up costs only that time: it is said in the summary.
    """
    scratch = Path(tempfile.mkdtemp(prefix="pytest-restore-warm-"))
    lock = (scratch / "lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    log = (scratch / "log").open("w")
    script = Path(__file__).with_name("warm_kernels.py")
    child = subprocess.Popen(
        [sys.executable, str(script), str(scratch / "cache")], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )
    os.environ[KERNELS_LOCK] = lock.name  # the workers, started after this, inherit it
    (scratch / "start").mkdir()
    os.environ[START_LOCKS] = str(scratch / "start")  # likewise (:func:`_first_worker_alone`)

    def release() -> None:
        child.wait()
        log.close()
        lock.close()  # and with it the lock

    def clean_up() -> None:
        if child.poll() is None:  # hung: the workers gave up waiting for it long ago
            child.kill()
        shutil.rmtree(scratch, ignore_errors=True)

    _WARM.update(child=child, scratch=scratch)
    threading.Thread(target=release, name="warm-kernels", daemon=True).start()
    config.add_cleanup(clean_up)


def _wait_for_kernels(deadline: float = 180.0) -> None:
    """Wait (in a worker) until the controller's kernel warm-up has ended, if there is one.

    A warm-up that hangs holds the lock: after ``deadline`` seconds the worker goes on without it
    (the kernels are then compiled where they are needed, as without the warm-up).
    """
    path = os.environ.pop(KERNELS_LOCK, None)
    if not path or not Path(path).exists():
        return
    with open(path) as lock:
        _hold_shared(lock, deadline)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say so when the kernels' warm-up failed (the run is slower, not wrong)."""
    child = _WARM.get("child")
    if child is not None and child.poll() != 0:
        lines = (_WARM["scratch"] / "log").read_text(errors="replace").strip().splitlines() or ["(no output)"]
        how = "is still running (it will be killed)" if child.returncode is None else f"exited {child.returncode}"
        terminalreporter.write_line(f"tests/warm_kernels.py {how}: {lines[-1]}")


#: The pytest cache directory of the main job (``embedded_report``), in the directory this test run's workers share.
#: The embedded default is generated there once (under its own file lock), for the main job and for
#: ``embedded_data`` both: a clean checkout has no cached copy, and each generated its own (2-3 CPU s).
MAIN_JOB_CACHE = "main-job-cache"


def _main_job_data(shared: Path) -> Path:
    """Where the main job's cache keeps the embedded default (``cache.mkdir("restore")`` there)."""
    return shared / MAIN_JOB_CACHE / "d" / "restore"


def _build_embedded_report(out: Path) -> None:
    cache = f"cache_dir={out.parent / MAIN_JOB_CACHE}"
    run = run_child(["benches/", "-p", "no:xdist", "-q", "--restore-ablations", "-o", cache], ROOT, out / "report")
    if not (run.report / "cells.csv").exists():
        pytest.fail(f"the main job wrote no report:\n{run.output[-6000:]}")
    (run.report / "pytest-output.txt").write_text(run.output)
    (run.report / "pytest-exit-code.txt").write_text(str(run.ret))


@pytest.fixture(scope="session")
def embedded_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report directory of ``pytest benches/ --restore-ablations`` on the embedded default, fake models.

    This is the README's main job (with the ablations), run for real in a
    subprocess once per test run; its output and exit code are kept beside
    the report (``pytest-output.txt``, ``pytest-exit-code.txt``).
    """
    return shared_run(tmp_path_factory, "embedded-report", _build_embedded_report) / "report"


@pytest.fixture(scope="session")
def embedded_records(embedded_report: Path) -> tuple[Record, ...]:
    """The main job's records (``embedded_report``), read and validated once per process: ~0.9 CPU s a read of its
    4,512 records, which test_embedded, test_figure, test_snapshots and test_ablations each made (the module-scoped
    ones once per xdist worker running one of their tests). Records are frozen: each reader takes its own list."""
    return tuple(read_records(embedded_report / "records.jsonl"))


@pytest.fixture(scope="session")
def embedded_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default dataset, generated afresh once per test run.

    Not taken from the checkout's ``.pytest_cache``: a cached file from an
    older generator would hide a change to the generator from the tests that
    read it. The main job (``embedded_report``) reads the same file, from the
    cache directory of its own that this test run gives it; whichever asks
    first generates it.
    """
    return embedded_dataset(_main_job_data(shared_dir(tmp_path_factory)))


#: The tiny grid, every policy and budget, with the ablations: the shared serial and ``-n 2`` runs.
TINY_GRID_ARGS = [*small_args(), "--restore-ablations"]


def _build_tiny_grid(project: Path) -> None:
    (project / "test_grid.py").write_text(GRID)
    run_child(["-p", "no:xdist", *TINY_GRID_ARGS, "--junitxml=serial.xml"], project, project / "serial")
    # -v: which worker ran each item (the scheduling test reads it)
    run_child(["-n", "2", "-v", *TINY_GRID_ARGS, "--junitxml=parallel.xml"], project, project / "parallel")


@pytest.fixture(scope="session")
def tiny_grid_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[ChildRun, ChildRun]:
    """The tiny fixture's whole grid with the ablations, run serially and with ``-n 2`` in one project.

    A project as a user has it (the four-line grid module, the project's
    cache); the serial run writes ``serial/`` and ``serial.xml`` (JUnit XML),
    then the ``-n 2`` run writes ``parallel/`` and ``parallel.xml``. The tests
    of serial-vs-xdist identity, of the rebuilt report, of the ablations'
    report sections and of the JUnit XML all read these two runs.
    """

    project = shared_run(tmp_path_factory, "tiny-grid", _build_tiny_grid)
    return read_child(project / "serial"), read_child(project / "parallel")


RANKERS_GRID_ARGS = [
    f"--restore-data={TINY}", "--restore-budgets=600,300", "--restore-policies=no-evict,fifo,random",
    "--restore-bootstrap=300", "--restore-family-checks=report", "--restore-rankers=bm25-lite,dense:fake,hybrid:fake",
]


def _build_rankers_grid(project: Path) -> None:
    (project / "test_grid.py").write_text(GRID)
    # its readers (test_rankers, test_compare) read the records, tables and output, not the figure: built, not
    # rendered (the tiny grid's runs render theirs, which test_report compares byte for byte)
    (project / "conftest.py").write_text(FIGURES_NOT_RENDERED_CONFTEST)
    run_child(["-p", "no:xdist", "-v", *RANKERS_GRID_ARGS], project, project / "report")


@pytest.fixture(scope="session")
def rankers_grid(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """The tiny fixture under three rankers in one run (``--restore-rankers``), serially, ``-v``."""
    return read_child(shared_run(tmp_path_factory, "rankers-grid", _build_rankers_grid) / "report")


# The child runs above start building in the background as the session's tests start (see
# ``shared_runs_in_background``), the longest first: a worker asking for one then finds it built.
background_build("embedded_report", "embedded-report", _build_embedded_report)
background_build("tiny_grid_runs", "tiny-grid", _build_tiny_grid)
background_build("rankers_grid", "rankers-grid", _build_rankers_grid)


@pytest.fixture(scope="session", autouse=True)
def shared_runs_in_background(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Start building the shared child runs this session's tests read (``grid_helpers.start_background_builds``).

    Under xdist each worker starts its own thread at its own place in the
    list, so the two build two runs at once while both run other tests.
    """
    fixtures = {name for item in request.session.items for name in getattr(item, "fixturenames", ())}
    tmp_path_factory.getbasetemp()  # made here, not on the thread
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    thread = start_background_builds(tmp_path_factory, fixtures, first=int(worker.removeprefix("gw") or 0))
    yield
    stop_background_builds(thread)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test modules that read a run built in the background go last (in their order), so it is built meanwhile.

    Whole modules move, so their module-scoped fixtures are still set up once.
    Every xdist worker collects the same order.
    """
    late = {item.path for item in items if BACKGROUND_BUILDS.keys() & set(getattr(item, "fixturenames", ()))}
    items[:] = [item for item in items if item.path not in late] + [item for item in items if item.path in late]


@pytest.fixture(scope="session")
def tiny_report(tiny_grid_runs: tuple[ChildRun, ChildRun]) -> Path:
    """The serial tiny grid's report directory (the viewers' tests read its records and report.html)."""
    return tiny_grid_runs[0].report


@pytest.fixture(scope="session")
def tiny_records(tiny_report: Path) -> list[dict[str, Any]]:
    """The serial tiny grid's records, as records.jsonl holds them (one JSON object per line, in order)."""
    return [json.loads(line) for line in (tiny_report / "records.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def figures_unrendered() -> Iterator[None]:
    """For a module (``pytestmark = pytest.mark.usefixtures("figures_unrendered")``) whose tests read no report's
    figure: the reports its runs write in this process build the figure and do not render it
    (``grid_helpers.figures_not_rendered``)."""
    with figures_not_rendered():
        yield


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project with the grid module and fast retries; no OpenAI settings leak in from the environment."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(FAST_RETRIES)
    return pytester
