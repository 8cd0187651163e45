"""The ``--restore-*`` options and ini keys, and whether a run asked for the audit.

Imported whenever pytest loads the plugin, so it imports nothing but pytest:
an unrelated test session pays for this module only.
"""

from __future__ import annotations

import ast
import os
import uuid
from pathlib import Path
from typing import Any, Literal

import pytest

#: The bootstrap's default seed (``pytest_restore.stats.analysis.DEFAULT_SEED``, which a test
#: keeps equal; not imported from there: that module loads numpy).
DEFAULT_SEED = 20_240_607

#: The item property a grid cell's records travel in (from xdist workers too).
RECORDS_PROPERTY = "restore_records"

#: The plugin's session object, once the run is an audit (see :func:`requested`).
#: (a ``plugin.session.Role``; typed ``Any`` so that this module names nothing of plugin/session.py,
#: which imports it)
SESSION_KEY: pytest.StashKey[Any] = pytest.StashKey()
#: This run's id on an xdist controller, handed to the workers (their shared cells' directory).
RUN_KEY = pytest.StashKey[str]()
#: Set when xdist was asked for ``-n auto`` (the plugin may then keep a small grid on one worker).
AUTO_KEY = pytest.StashKey[bool]()
#: Set when ``-n auto`` was answered with no worker: a small audit runs in one process.
ONE_PROCESS_KEY = pytest.StashKey[bool]()

# name, default, help, ini type. Every option is --restore-NAME and ini key restore_NAME.
# The ini type is what pytest checks in the ini file ("int" and "float" need pytest 8.4;
# older versions read them as strings and the settings parse them the same way).
OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "data",
        "",
        ("data file to audit, LongMemEval-S or LoCoMo (.json or .json.gz; the loader is picked from its shape) "
        "(default: the embedded synthetic dataset)"),
        "string",
    ),
    ("dataset", "", "dataset loader to read --restore-data with: longmemeval, locomo or a registered name", "string"),
    (
        "errata",
        "",
        "corrections file applied to --restore-data as it loads (e.g. the LoCoMo audit's errors.json); its sha256 joins the run id",
        "string",
    ),
    ("errata-apply", "evidence", "parts of each correction applied: evidence, answers or evidence,answers", "string"),
    ("errata-format", "", "errata format to read --restore-errata with: locomo-audit or a registered name (default: by shape)", "string"),
    ("report-dir", "restore-report", "directory the session report is written to", "string"),
    (
        "budgets",
        "",
        ("store budgets in tokens, comma-separated, 80k style allowed (default: the dataset's own: "
        "80k,30k,8k for LongMemEval, 16k,8k,2k for LoCoMo)"),
        "string",
    ),
    ("policies", "", "policies to audit, comma-separated (default: every registered policy)", "string"),
    ("seeds", "0,1,2", "seeds of the random policy, comma-separated", "string"),
    ("granularity", "turn", "memory unit: turn or session", "string"),
    ("questions", "", "audit a stratified, seeded subset of N questions", "int"),
    ("subset-seed", "0", "seed of the --restore-questions subset", "int"),
    ("reader", "fake", "reader model: fake or PROVIDER:MODEL (openai:MODEL built in)", "string"),
    ("judge", "fake", "judge model: fake or PROVIDER:MODEL (openai:MODEL built in)", "string"),
    ("scorer", "fake", "importance scorer model: fake or PROVIDER:MODEL (openai:MODEL built in)", "string"),
    ("ranker", "bm25-lite", "read-time ranker, one per run: bm25-lite, recency, dense:EMBEDDER, hybrid:EMBEDDER (EMBEDDER: fake or openai:MODEL) or a registered name", "string"),
    ("embedded-questions", "100", "size of the embedded synthetic dataset", "int"),
    ("bootstrap", "10000", "question-cluster bootstrap resamples", "int"),
    ("bootstrap-seed", str(DEFAULT_SEED), "seed of the bootstrap", "int"),
    ("equivalence-margin", "0.03", "margin of the TOST equivalence test on matched pairs", "float"),
    (
        "base-url",
        "",
        "OpenAI-compatible server for openai: models (default: OPENAI_BASE_URL or OpenAI)",
        "string",
    ),
    ("cache", "", "response cache directory (default: .pytest_cache/d/restore/responses)", "string"),
    ("max-concurrency", "16", "ceiling of concurrent requests per model and process", "int"),
    ("rpm", "", "requests-per-minute limit per model (whole run)", "float"),
    ("tpm", "", "tokens-per-minute limit per model (whole run)", "float"),
    ("max-tries", "6", "tries per request before it is recorded as failed", "int"),
    ("timeout", "60", "seconds per request, the whole reply included", "float"),
    (
        "max-retry-after",
        "60",
        "longest Retry-After wait (seconds) slept through; a longer one fails the call, said",
        "float",
    ),
    (
        "rankers",
        "",
        "rankers compared in one run, comma-separated (e.g. bm25-lite,dense:fake,hybrid:fake): the ranker becomes a grid dimension",
        "string",
    ),
    (
        "embed-limits",
        "",
        "embedder of dense:/hybrid: rankers: INPUTS per request,TOKENS per text (default: the model's known limits, else 256,512)",
        "string",
    ),
    ("prompts", "", "directory of prompt templates replacing the defaults (reader_system.txt, ...)", "string"),
    ("robustness-reader", "", "run the grid again under this second reader", "string"),
    ("audit-judge", "", "second judge that re-grades a stratified sample of recorded answers", "string"),
    ("audit-judge-sample", "400", "size of the judge audit's sample", "int"),
    ("calibration", "auto", "calibration gate before the grid: on, off, or auto (on for real models)", "string"),
    (
        "batch-poll",
        "30",
        "with --restore-batch: first wait in seconds between two looks at a batch (grows 1.5x, to 10 min)",
        "float",
    ),
    (
        "batch-resubmit",
        "0",
        (
            "with --restore-batch: times a round sends its failed requests again as a new batch "
            "(0: the run stops, said in one line)"
        ),
        "int",
    ),
    (
        "batch-export",
        "",
        "with --restore-dry-run: write the batch input file of --restore-batch-round here, send nothing",
        "string",
    ),
    ("batch-round", "", "the round --restore-batch-export writes: scorer, reader or judge", "string"),
    (
        "family-checks",
        "fail",
        (
            "fail: a hypothesis family's failed expectation fails the run where the run could test it; "
            "report: only report it"
        ),
        "string",
    ),
)


def _ini_type(kind: str) -> Literal["string", "int", "float"]:
    """The ini type pytest checks, where this pytest knows it."""
    if kind == "int" and _PYTEST_TYPED_INI:
        return "int"
    if kind == "float" and _PYTEST_TYPED_INI:
        return "float"
    return "string"


_PYTEST_TYPED_INI = tuple(int(x) for x in pytest.__version__.split(".")[:2]) >= (8, 4)


def _dest(name: str) -> str:
    return "restore_" + name.replace("-", "_")


def add_options(parser: pytest.Parser) -> None:
    """The ``--restore-*`` options, each also an ini key ``restore_*``."""
    group = parser.getgroup("restore", "restore-counterfactual audit")
    for name, default, help_, kind in OPTIONS:
        group.addoption(f"--restore-{name}", dest=_dest(name), default=None, help=f"{help_} [{default or 'unset'}]")
        ini_kind = _ini_type(kind)
        # A typed key's default is None when unset, so "unset" is told apart from a value.
        parser.addini(_dest(name), help=help_, type=ini_kind, default=default if ini_kind == "string" else None)
    group.addoption(
        "--restore",
        dest="restore",
        action="store_true",
        default=False,
        help="run the audit: the grid the package ships joins the session (on the embedded default "
        "unless other --restore-* options say otherwise)",
    )
    group.addoption(
        "--restore-dry-run",
        dest="restore_dry_run",
        action="store_true",
        default=False,
        help="print the model calls the grid needs (and what is cached) with token estimates, then stop",
    )
    group.addoption(
        "--restore-ablations",
        dest="restore_ablations",
        action="store_true",
        default=None,
        help="run the restore-tightness ablations on the regime-(b) irreversible cases",
    )
    parser.addini("restore_ablations", help="run the restore-tightness ablations", type="bool", default=False)
    group.addoption(
        "--restore-batch",
        dest="restore_batch",
        action="store_true",
        default=None,
        help="run the real models' calls as OpenAI Batch API rounds (half price, within 24 h), never live",
    )
    parser.addini("restore_batch", help="run the real models' calls through the Batch API", type="bool", default=False)
    group.addoption(
        "--restore-price",
        dest="restore_price",
        action="append",
        default=None,
        metavar="MODEL=IN,OUT",
        help="price of a model in USD per million input and output tokens, for the dry run's estimate "
        "(repeatable; gpt-4o-mini, gpt-5.4-mini and gpt-5.5 are built in)",
    )
    parser.addini("restore_price", help="model prices for the dry run, one MODEL=IN,OUT a line", type="linelist")


def requested(config: pytest.Config) -> bool:
    """Whether the command line or the ini file asks for the audit (any ``--restore-*`` option or
    ``restore_*`` key): then the plugin starts at configure time and checks every value first."""
    for name, _default, _help, _kind in OPTIONS:
        if config.getoption(_dest(name)) is not None:
            return True
    if config.getoption("restore") or config.getoption("restore_dry_run") or config.getoption("restore_ablations") is not None:
        return True
    if config.getoption("restore_batch") is not None:
        return True
    if config.getoption("restore_price") is not None:
        return True
    for name, default, _help, kind in OPTIONS:
        try:
            value = config.getini(_dest(name))
        except pytest.UsageError:  # a malformed value: the settings name it
            return True
        unset = default if _ini_type(kind) == "string" else None
        if value != unset:
            return True
    return bool(config.getini("restore_ablations") or config.getini("restore_price") or config.getini("restore_batch"))


def new_run_id() -> str:
    """A fresh run id (the name of the directory xdist workers share cells in)."""
    return uuid.uuid4().hex


#: A grid on at most this many embedded questions, or on a data file of at most this size, is
#: small: a second xdist worker would spend more preparing the data again than it takes over
#: (measured on the embedded 100 questions: benches/bench_startup.py).
SMALL_GRID_QUESTIONS = 200
SMALL_GRID_BYTES = 20_000_000


def small_data(data: str | None, embedded_questions: int) -> bool:
    """Whether an audit of this data is small (see ``SMALL_GRID_QUESTIONS``)."""
    if not data:
        return embedded_questions <= SMALL_GRID_QUESTIONS
    try:
        return os.path.getsize(data) <= SMALL_GRID_BYTES
    except OSError:
        return False  # the settings report it


#: Test files looked at, at most, to tell whether the command's paths hold an audit grid.
_GRID_SCAN_LIMIT = 200


def paths_hold_a_grid(config: pytest.Config) -> bool:
    """Whether the test paths given on the command line hold a test asking for ``restore_cell``.

    Read from the files' text before collection, so that ``-n auto`` can run a
    small grid in one process from the start instead of paying for workers
    that would each prepare the data again. Only explicit paths are looked at,
    and at most ``_GRID_SCAN_LIMIT`` test files.
    """
    seen = 0
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = sorted(path.rglob("test_*.py")) + sorted(path.rglob("*_test.py"))
        else:
            continue
        for file in candidates:
            seen += 1
            if seen > _GRID_SCAN_LIMIT:
                return False
            if _asks_for_restore_cell(file):
                return True
    return False


def _asks_for_restore_cell(file: Path) -> bool:
    """Whether a test module defines a test taking the ``restore_cell`` fixture (a mention in a
    string, as in this project's own tests of the plugin, does not count)."""
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
        if "restore_cell" not in text:
            return False
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return False
    scopes = [tree.body] + [node.body for node in tree.body if isinstance(node, ast.ClassDef)]
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test")
        and any(arg.arg == "restore_cell" for arg in node.args.args)
        for body in scopes
        for node in body
    )


def small_audit(config: pytest.Config) -> bool:
    """Whether the command asks for the audit of small data (read before configure): a
    ``--restore-*`` option or ``restore_*`` key, or test paths that hold the grid."""
    if not requested(config) and not paths_hold_a_grid(config):
        return False
    values = {}
    for name in ("data", "embedded-questions"):
        value = config.getoption(_dest(name))
        if value is None:
            try:
                value = config.getini(_dest(name))
            except pytest.UsageError:
                return False  # the settings report it
        values[name] = "" if value is None else str(value).strip()
    try:
        questions = int(values["embedded-questions"] or "100")
    except ValueError:
        return False
    return small_data(values["data"] or None, questions)
