"""Two runs side by side: how each cell's figures moved, with paired intervals.

``python -m pytest_restore compare OLD NEW`` reads the ``records.jsonl`` of
two report directories (two rankers, two readers, a policy before and after a
change) and, per cell present in both, gives each run's two-bin share,
irreversible rate, recoverable rate and accuracy and the paired difference
NEW - OLD. The difference is computed on the questions that are
oracle-answerable in the cell in both runs, and its interval comes from the
question-cluster bootstrap (one resample matrix over those questions, so the
two runs move together question by question; ``random`` pools its seeds per
question as in the report). The figures are the statistics'
(:mod:`pytest_restore.stats.comparison`); this module reads the two report
directories, gates on them and writes them out.

``--fail-if-worse FIGURE=THRESHOLD`` turns it into a gate: the command exits
1 when some cell's figure got worse by more than THRESHOLD (point estimate of
the paired difference). Worse is up for the two-bin share and the two rates
(more destroyed or missed evidence) and down for accuracy. A gate over no
compared question fails: it would otherwise pass having checked nothing.

Two runs are only comparable when they audited the same data (the dataset's
sha256 in ``summary.json``), the same questions and with the same reader;
:func:`unlike` names the first difference and ``compare`` refuses it unless
asked to compare them anyway (``--allow-unlike``). Cells one run holds and the
other does not (another ranker, a part of the grid) are named, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pytest_restore.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED
from pytest_restore.record import Record
from pytest_restore.report.inputs import interval, num, read_records, read_run_info
from pytest_restore.stats.comparison import FIGURES, Comparison, cell_name, compare_records


class CompareError(ValueError):
    """Two runs that cannot be compared, or a bad threshold."""


def compare_dirs(
    old: str | Path,
    new: str | Path,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    allow_unlike: bool = False,
) -> Comparison:
    """Compare the ``records.jsonl`` of two report directories.

    Runs on other data, other questions or another reader are refused with a
    one-line :class:`CompareError` (see :func:`unlike`) unless ``allow_unlike``.
    """
    runs = []
    for folder in (old, new):
        path = Path(folder) / "records.jsonl"
        if not path.exists():
            raise CompareError(f"{folder}: no records.jsonl (give a report directory)")
        records = read_records(path)
        runs.append((records, read_run_info(path).dataset.get("sha256")))
    problem = unlike(str(old), runs[0][0], runs[0][1], str(new), runs[1][0], runs[1][1])
    if problem is not None and not allow_unlike:
        raise CompareError(f"{problem}; --allow-unlike compares them anyway")
    return compare_records(runs[0][0], runs[1][0], old_name=str(old), new_name=str(new), resamples=resamples, seed=seed)


def unlike(
    old: str,
    old_records: Sequence[Record],
    old_sha: object,
    new: str,
    new_records: Sequence[Record],
    new_sha: object,
) -> str | None:
    """Why two runs are not alike (their dataset, question set or reader differ), or ``None``.

    The dataset is its sha256 as each ``summary.json`` gives it (not compared when
    either lacks one); the questions and readers are those the records hold.
    """
    if old_sha and new_sha and old_sha != new_sha:
        return f"{old} and {new} audited different data (sha256 {str(old_sha)[:12]}... and {str(new_sha)[:12]}...)"
    questions = {r.question_id for r in old_records}, {r.question_id for r in new_records}
    if questions[0] != questions[1]:
        return (
            f"{old} and {new} audited different questions ({len(questions[0])} and {len(questions[1])}, "
            f"{len(questions[0] & questions[1])} in both)"
        )
    readers = sorted({r.reader for r in old_records}), sorted({r.reader for r in new_records})
    if readers[0] != readers[1]:
        return f"{old} and {new} have different readers ({', '.join(readers[0])} and {', '.join(readers[1])})"
    return None


def gate_problem(comparison: Comparison, thresholds: Sequence[tuple[str, float]]) -> str | None:
    """Why a ``--fail-if-worse`` gate cannot pass on this comparison (no question compared), or ``None``."""
    if not thresholds or comparison.compared_questions:
        return None
    cells = f"{len(comparison.cells)} cells in both runs" if comparison.cells else "no cell in both runs"
    return f"--fail-if-worse: no question was compared ({cells}): the gate checked nothing"


def parse_threshold(text: str) -> tuple[str, float]:
    """``"irr_rate=0.02"`` -> ``("irr_rate", 0.02)``; the figure must be one of :data:`FIGURES`."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in FIGURES:
        raise CompareError(f"--fail-if-worse: {text!r}: use FIGURE=THRESHOLD with FIGURE one of {', '.join(FIGURES)}")
    try:
        threshold = float(value)
    except ValueError:
        raise CompareError(f"--fail-if-worse: {text!r}: {value!r} is not a number") from None
    if threshold < 0:
        raise CompareError(f"--fail-if-worse: {text!r}: the threshold cannot be negative")
    return name, threshold


def worse_cells(comparison: Comparison, thresholds: Sequence[tuple[str, float]]) -> list[str]:
    """One line per cell and figure that got worse by more than its threshold."""
    lines = []
    for cell in comparison.cells:
        for name, threshold in thresholds:
            f = cell.figure(name)
            if f.worse_by is not None and f.worse_by > threshold:
                lines.append(
                    f"{cell_name(cell.key)}: {name} "
                    f"{num(f.old)} -> {num(f.new)} ({_signed(f.difference)}, 95% CI {interval(f.lo, f.hi, signed=True)}), "
                    f"worse by more than {threshold:g}"
                )
    return lines


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.3f}"


def render_markdown(comparison: Comparison) -> str:
    """The comparison as markdown: one row per cell, each figure as OLD -> NEW (difference, interval)."""
    out = [
        "# Two runs compared",
        "",
        (f"OLD: `{comparison.old}`; NEW: `{comparison.new}`. Per cell present in both: each figure in OLD and "
        "NEW and the paired difference NEW - OLD on the questions oracle-answerable in that cell in both runs, "
        f"with its {DEFAULT_CONFIDENCE:.0%} question-cluster bootstrap interval ({comparison.resamples} resamples, "
        f"seed {comparison.seed})."),
        "",
        "| cell | questions | " + " | ".join(FIGURES) + " |",
        "|---|---:|" + "---|" * len(FIGURES),
    ]
    for cell in comparison.cells:
        parts = [
            f"{num(f.old)} -> {num(f.new)} ({_signed(f.difference)}, {interval(f.lo, f.hi, signed=True)})" for f in cell.figures
        ]
        name = cell_name(cell.key)
        out.append(f"| {name} | {cell.shared_questions} | " + " | ".join(parts) + " |")
    if not comparison.cells:
        out.append("| (no cell in both runs) | |" + " |" * len(FIGURES))
    for label, names in (("only in OLD", comparison.only_old), ("only in NEW", comparison.only_new)):
        if names:
            out += ["", f"Cells {label}: {', '.join(names)}."]
    return "\n".join(out) + "\n"


#: The figures' names in the terminal's table (``compare.md`` names them whole).
SHORT_NAMES: dict[str, str] = {
    "two_bin_share": "two-bin",
    "irr_rate": "irr/N",
    "rec_rate": "rec/N",
    "dis_rate": "dis/N",
    "destruction_share": "destr",
    "accuracy": "acc",
}


def render_terminal(comparison: Comparison) -> list[str]:
    """The comparison for a 100-column terminal: per cell, each figure's paired difference NEW - OLD,
    starred where its interval leaves 0 out; OLD, NEW and the intervals stay in ``compare.md``."""
    names = [cell_name(cell.key) for cell in comparison.cells]
    width = max([4, *map(len, names)]) + 2
    lines = [f"{'cell':<{width}}{'q':>5}" + "".join(f"{SHORT_NAMES[f]:>10}" for f in FIGURES)]
    for name, cell in zip(names, comparison.cells):
        changes = []
        for f in cell.figures:
            moved = f.lo is not None and f.hi is not None and (f.lo > 0 or f.hi < 0)
            changes.append(f"{_signed(f.difference) + ('*' if moved else ' '):>10}")
        lines.append((f"{name:<{width}}{cell.shared_questions:>5}" + "".join(changes)).rstrip())
    if not comparison.cells:
        lines.append("(no cell in both runs)")
    lines.append(
        f"NEW - OLD on the q questions both runs hold in the cell; * where its {DEFAULT_CONFIDENCE:.0%} interval "
        "leaves 0 out"
    )
    return lines


def write(comparison: Comparison, out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``compare.md`` and ``compare.json`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "compare.md", out / "compare.json"
    md.write_text(render_markdown(comparison), encoding="utf-8")
    js.write_text(json.dumps(comparison.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return md, js
