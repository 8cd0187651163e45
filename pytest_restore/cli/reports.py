"""``report`` (a report rebuilt from saved records), ``show`` (one question's story) and ``compare`` (two runs)."""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from pytest_restore.cli.subcommand import Subcommand, at_least, io_error, refuse
from pytest_restore.exits import IO_ERROR, out_dir_problem

__all__ = ["COMPARE", "REPORT", "SHOW"]


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("records", metavar="RECORDS.jsonl", help="saved per-question records")
    parser.add_argument("--out", required=True, help="directory to write the report into")
    parser.add_argument(
        "--data", metavar="FILE", default=None,
        help="the data file the run read, for report.html's texts (default: the one summary.json names)",
    )


def _report(args: argparse.Namespace) -> int:
    """rebuild the report from saved records, without any model call

    Write the session report (records.jsonl, cells.csv, hypotheses.json, report.md, summary.json,
    figure.png, figure.svg) from a saved records.jsonl. The run section (settings, dataset,
    exclusions) is read from the summary.json beside RECORDS; without one the report has no run
    settings and the statistics use their defaults. Given the files of a session, the output is
    byte-identical to what the session wrote.
    """
    from pytest_restore.report import inputs
    from pytest_restore.report.writer import write_report
    from pytest_restore.run.checks import read_check
    from pytest_restore.run.staging import report_dir_problem, staging_dir, swap_into_place
    from pytest_restore.stats.families import default_families

    # replaced whole, as a session's report directory is: another run's files (its calibration.json)
    # never stay beside this one's, and a directory holding something else is refused
    problem = report_dir_problem(args.out, "--out")
    if problem:
        return refuse(problem, IO_ERROR)
    try:
        records = inputs.read_records(args.records)
        # no conftest.py here: the built-in families and those of installed packages' entry points
        info = replace(inputs.read_run_info(args.records, read_check), families=tuple(default_families().values()))
        inputs.check_run_info(records, info, args.records)
    except inputs.RecordsError as err:
        return refuse(err)
    except ValueError as err:  # records that read well but contradict each other
        return refuse(f"{args.records}: {err}")
    staging: Path | None = None
    try:
        staging = staging_dir(Path(args.out))
        files = write_report(records, info, staging, data_file=args.data)
        swap_into_place(staging, Path(args.out))
    except OSError as err:  # a full disk, or the directory made read-only since the check
        return io_error("--out", args.out, err)
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)  # swapped in, it is gone; not swapped in, it goes
    print(f"report: {len(records)} records -> {args.out}")
    for failure in files.failures:
        print(f"expectation not met: {failure}")
    for line in files.untestable:
        print(f"not testable at this N: {line}")
    return 0


REPORT = Subcommand("report", _report, _report_arguments)


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("question_id", metavar="QUESTION_ID", help="the question's id")
    parser.add_argument(
        "--report-dir", default="restore-report",
        help="the run's report directory, with records.jsonl and summary.json (default: restore-report)",
    )
    parser.add_argument(
        "--cell", default=None,
        help="one cell: POLICY-BUDGET as the grid names it (fifo-80k), or POLICY-BUDGET-REGIME (fifo-80k-b)",
    )
    parser.add_argument(
        "--data", metavar="FILE", default=None,
        help="the data file the run read (default: the one summary.json names; the embedded default is regenerated)",
    )
    parser.add_argument(
        "--full", action="store_true",
        help="without --cell: every cell's story whole, not one line per cell (with --cell the cell is always whole)",
    )
    parser.add_argument("--width", type=at_least(40), default=100, help="line width (default: 100)")


def _show(args: argparse.Namespace) -> int:
    """print one question's story: its gold, their eviction, what each condition's reader saw

    Print why a question landed in its bin, from a report directory's records and the data file the
    run read (no model call): the question, the reference, the gold units and when each was evicted,
    what each condition's reader saw (gold, forced, ranked), the answers, the verdicts and the bin.
    Without --cell: one line per cell and how to see one whole; with --cell: that cell whole, every
    memory its readers saw and every held memory citing gold in full.
    """
    from pytest_restore.report import story as stories
    from pytest_restore.report.inputs import RecordsError, read_records, read_run_info

    path = Path(args.report_dir) / "records.jsonl"
    try:
        records = read_records(path)
        info = read_run_info(path)
        chosen = stories.select(records, args.question_id, args.cell)
        dataset = stories.open_data(info, args.data)
    except (RecordsError, stories.StoryError) as err:
        return refuse(err)
    question = next((q for q in dataset.questions if q.question_id == args.question_id), None)
    if question is None:
        return refuse(f"{dataset.path}: no question {args.question_id!r} (not the run's data?)")
    story = stories.tell(chosen, question)
    if args.cell is None and not args.full:
        sys.stdout.write(stories.render_story_summary(story, width=args.width))
    else:
        sys.stdout.write(stories.render_story_text(story, width=args.width, full=True))
    return 0


SHOW = Subcommand("show", _show, _show_arguments)


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD", help="report directory of the baseline run")
    parser.add_argument("new", metavar="NEW", help="report directory of the run to check")
    parser.add_argument("--out", default="restore-compare", help="where compare.md and compare.json go")
    parser.add_argument(
        "--fail-if-worse",
        action="append",
        default=[],
        metavar="FIGURE=THRESHOLD",
        help="exit 1 when a cell's FIGURE (two_bin_share, irr_rate, rec_rate, accuracy) got worse by more "
        "than THRESHOLD (repeatable); worse is up, except for accuracy",
    )
    parser.add_argument(
        "--allow-unlike",
        action="store_true",
        help="compare runs whose dataset, question set or reader differ (refused otherwise)",
    )
    parser.add_argument("--bootstrap", type=at_least(100), default=10_000, help="resamples, at least 100 (default: 10000)")
    parser.add_argument("--bootstrap-seed", type=at_least(0), default=None, help="seed (default: the report's)")


def _compare(args: argparse.Namespace) -> int:
    """compare two report directories cell by cell, with paired bootstrap intervals

    Per cell present in both runs: the two-bin share, irreversible rate, recoverable rate and
    accuracy of OLD and NEW and the paired difference NEW - OLD on the questions both share, with
    its question-cluster bootstrap interval. Prints each difference in a table of 100 columns and
    writes the whole comparison to compare.md and compare.json. With --fail-if-worse, exits 1 when a
    cell got worse beyond the threshold.
    """
    from pytest_restore import compare
    from pytest_restore.bootstrap import DEFAULT_SEED
    from pytest_restore.report.inputs import RecordsError

    try:
        thresholds = [compare.parse_threshold(t) for t in args.fail_if_worse]
    except compare.CompareError as err:  # checked before any work, as argparse checks the rest
        return refuse(err)
    problem = out_dir_problem(args.out, "--out")
    if problem:
        return refuse(problem, IO_ERROR)
    try:
        comparison = compare.compare_dirs(
            args.old, args.new, resamples=args.bootstrap,
            seed=DEFAULT_SEED if args.bootstrap_seed is None else args.bootstrap_seed,
            allow_unlike=args.allow_unlike,
        )
    except (compare.CompareError, RecordsError) as err:
        return refuse(err)
    try:
        compare.write(comparison, args.out)
    except OSError as err:
        return io_error("--out", args.out, err)
    print("\n".join(compare.render_terminal(comparison)))
    print(
        f"compare: {len(comparison.cells)} cells, {comparison.compared_questions} questions compared "
        f"-> {args.out}/compare.md (OLD, NEW and each interval), compare.json"
    )
    for label, names in (("only in OLD", comparison.only_old), ("only in NEW", comparison.only_new)):
        if names:
            print(f"not compared: {len(names)} cells {label}: {', '.join(names)}")
    problem = compare.gate_problem(comparison, thresholds)
    if problem is not None:
        return refuse(problem, 1)
    worse = compare.worse_cells(comparison, thresholds)
    for line in worse:
        print(f"worse: {line}")
    return 1 if worse else 0


COMPARE = Subcommand("compare", _compare, _compare_arguments)
