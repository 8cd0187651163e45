"""The audit's options, declared once: their names, defaults, help and ini types, and the raw values of a run.

The plugin turns each into a pytest option ``--restore-NAME`` and ini key
``restore_NAME`` (``plugin/options.py``); the command line's ``batch export``
reads the same options after ``--``. :class:`RawOptions` is what either hands
the settings (``run/settings.py``): each value as text, and where it came from.
Imports nothing: pytest loads this module in every session.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The bootstrap's default seed (``pytest_restore.stats.analysis.DEFAULT_SEED``, which a test
#: keeps equal; not imported from there: that module loads numpy).
DEFAULT_SEED = 20_240_607

# name, default, help, ini type. Every option is --restore-NAME and ini key restore_NAME.
# The ini type is what pytest checks in the ini file ("int" and "float" need pytest 8.4;
# older versions read them as strings and the settings parse them the same way).
OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "data",
        "",
        ("data file to audit, LongMemEval-S or LoCoMo (.json or .json.gz; the loader is picked from its shape), "
        "or a fetched dataset's name: locomo, longmemeval-s (python -m pytest_restore data list) "
        "(default: the embedded synthetic dataset)"),
        "string",
    ),
    ("dataset", "", "dataset loader to read --restore-data with: longmemeval, locomo or a registered name", "string"),
    (
        "errata",
        "",
        ("corrections file applied to --restore-data as it loads (e.g. the LoCoMo audit's errors.json, fetched as "
        "locomo-errata: --restore-errata=locomo-errata); its sha256 joins the run id"),
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
    (
        "judge-format",
        "text",
        (
            "how the judge replies: text (one word), json-schema (a JSON verdict under response_format json_schema: "
            "OpenAI's structured outputs, vLLM, llama.cpp's llama-server) or json-object (response_format json_object "
            "with the schema: llama-cpp-python's server)"
        ),
        "string",
    ),
    ("scorer", "fake", "importance scorer model: fake or PROVIDER:MODEL (openai:MODEL built in)", "string"),
    (
        "writer-model",
        "",
        "model the memory systems that write (session-summary-model, fact-extract-model, mem0) write with: fake or PROVIDER:MODEL (default: the reader)",
        "string",
    ),
    (
        "writer-embedder",
        "",
        "embeddings model the memory libraries (mem0, ...) embed with through the run's gateway: fake or PROVIDER:MODEL (default: fake)",
        "string",
    ),
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
    ("batch-round", "", "the round --restore-batch-export writes: scorer, writer, reader or judge", "string"),
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



@dataclass(frozen=True)
class RawOptions:
    """A run's options as given, before they are parsed: each option's text and where it came from."""

    #: option name (``policies``) -> its text, stripped; an option not given has its default
    values: Mapping[str, str]
    #: option name -> where the value came from, as an error message names it (``--restore-policies``,
    #: ``ini key restore_policies (pytest.ini)``)
    where: Mapping[str, str] = field(default_factory=dict)
    #: ``--restore-price`` texts (``MODEL=IN,OUT``) and where they came from
    prices: tuple[str, ...] = ()
    price_where: str = "--restore-price"
    dry_run: bool = False
    ablations: bool = False
    batch: bool = False
    #: the options given on the command line (not defaulted, not from the ini file)
    given: frozenset[str] = frozenset()

    def value(self, name: str) -> str:
        """The text of option ``name``."""
        return self.values[name]

    def source(self, name: str) -> str:
        """Where option ``name`` came from."""
        return self.where.get(name, f"--restore-{name}")


class OptionsError(ValueError):
    """An audit option of the command line without its value (the command line's one-line error)."""


def parse_args(args: Sequence[str]) -> tuple[RawOptions, list[str]]:
    """The ``--restore-*`` options of a command line (``batch export ... -- ARGS``), defaults for the
    rest, and the arguments that are not the audit's (pytest's own: test paths, ``-p no:xdist``).

    Only the audit's options are read: no ini file, no ``conftest.py``.
    """
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False, allow_abbrev=False)
    for name, _default, _help, _kind in OPTIONS:
        parser.add_argument(f"--restore-{name}", dest=name, default=None)
    for flag in ("dry-run", "ablations", "batch"):
        parser.add_argument(f"--restore-{flag}", dest=flag, action="store_true")
    parser.add_argument("--restore-price", dest="price", action="append", default=[])
    try:
        known, unknown = parser.parse_known_args(list(args))
    except argparse.ArgumentError as err:
        raise OptionsError(str(err)) from None
    typo = next((a for a in unknown if a.startswith("--restore-")), None)
    if typo is not None:
        raise OptionsError(f"{typo.split('=', 1)[0]}: no such option of the audit")
    given = vars(known)
    values = {name: str(given[name] if given[name] is not None else default).strip() for name, default, _h, _k in OPTIONS}
    raw = RawOptions(
        values, prices=tuple(given["price"]), dry_run=given["dry-run"], ablations=given["ablations"], batch=given["batch"],
        given=frozenset(name for name, _d, _h, _k in OPTIONS if given[name] is not None),
    )
    return raw, unknown


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


