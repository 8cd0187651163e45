"""The report's figure shows what the findings lead with: the two-bin share and its interval."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from matplotlib.colors import to_rgb
from matplotlib.container import ErrorbarContainer
from matplotlib.patches import PathPatch

from pytest_restore.record import Record
from pytest_restore.report.figure import (
    DISTORTED,
    IRREVERSIBLE,
    RECOVERABLE,
    RESIDUAL,
    draw_figure,
    write_figure,
)
from pytest_restore.report.inputs import (
    RunInfo,
    analyse_records,
    dataset_label,
    read_run_info,
)
from pytest_restore.report.simulated import simulated_label
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.findings import Findings, findings

#: "fifo 0.91 (95% CI .77-1.00)" in the findings' first line
_FINDING = re.compile(r"([\w-]+) (\d\.\d\d) \(95% CI ([.\d]+)-([.\d]+)\)")


def _first_finding(report_md: str) -> tuple[str, dict[str, tuple[str, str, str]]]:
    """The findings' first line: its budget and each policy's share and interval, as written."""
    findings = report_md.split("## Findings", 1)[1]
    first = next(line for line in findings.splitlines() if line.startswith("- "))
    budget = re.search(r"At (\w+) under top-k retrieval", first)
    assert budget is not None, first
    return budget.group(1), {m[0]: (m[1], m[2], m[3]) for m in _FINDING.findall(first)}


@dataclass(frozen=True)
class Run:
    """The embedded report's records and run info, analysed once for this module's tests (2-3 CPU s each time)."""

    records: list[Record]
    info: RunInfo
    analysis: Analysis
    findings: Findings


@pytest.fixture(scope="module")
def run(embedded_report: Path, embedded_records: tuple[Record, ...]) -> Run:
    records = list(embedded_records)
    info = read_run_info(embedded_report / "records.jsonl")
    analysis = analyse_records(records, info)
    return Run(records, info, analysis, findings(analysis))


def _short(value: float) -> str:
    text = f"{value:.2f}"
    return text[1:] if text.startswith("0.") else text


def test_the_headline_is_the_findings_first_line(embedded_report: Path, run: Run, tmp_path: Path) -> None:
    """Each evicting policy's headline bar at the loosest budget draws the share and interval the
    findings' first line prints; the figure the report holds is that drawing."""
    budget, written = _first_finding((embedded_report / "report.md").read_text(encoding="utf-8"))
    assert set(written) == {"fifo", "random", "redundancy", "llm-importance"}

    figure = draw_figure(run.findings, dataset=dataset_label(run.info))
    headline = figure.axes[0]
    drawn = {}
    for container in headline.containers:
        if isinstance(container, ErrorbarContainer):
            point = container.lines[0].get_ydata()[0]
            lo, hi = sorted(cap.get_ydata()[0] for cap in container.lines[1])
            drawn[container.get_label()] = (f"{point:.2f}", _short(lo), _short(hi))
    for policy, figures in written.items():
        assert drawn[f"{policy} {budget} fake"] == figures, policy
    # the control and the reference are not in the headline, as they are not in the findings
    assert not any(label.split()[0] in ("control", "no-evict") for label in drawn)
    labels = {text.get_text() for text in headline.texts}
    for share, lo, hi in written.values():
        assert f"{share}\n{lo}-{hi}" in labels

    write_figure(run.findings, tmp_path, dataset=dataset_label(run.info), simulated=simulated_label(run.records))
    assert (tmp_path / "figure.svg").read_bytes() == (embedded_report / "figure.svg").read_bytes()


def test_the_title_says_simulated_and_what_the_headline_leaves_out(run: Run) -> None:
    """Pasted into slides, the figure keeps its caveat; its top panel names the policies it leaves out."""
    fakes = simulated_label(run.records)
    assert fakes.startswith("reader fake")
    title = draw_figure(run.findings, simulated=fakes).axes[0].get_title(loc="left").splitlines()
    assert title[0] == f"SIMULATED: fake models ({fakes}), not a finding about any model"
    assert title[-1] == "left out here, in the panel below: no-evict (the reference), control (the positive control)"
    real = draw_figure(run.findings).axes[0].get_title(loc="left")  # a real reader's figure has no such line
    assert "SIMULATED" not in real and real.splitlines()[0].startswith("Irreversible share")


def test_each_bin_is_one_hatched_shape_of_its_cells_shares(run: Run) -> None:
    """A panel draws each bin's fills as one shape (a hatch tile rendered once, not once per bar):
    a rectangle per cell where the bin's share is above zero, as tall as that share."""
    decomposition = draw_figure(run.findings).axes[1]
    cells = [c for c in run.analysis.cells if c.regime == "b" and not c.ranker and c.err]
    shapes = {p.get_hatch(): p for p in decomposition.patches if isinstance(p, PathPatch)}
    shares = {
        IRREVERSIBLE: [c.irr_share for c in cells], RECOVERABLE: [c.rec_share for c in cells],
        DISTORTED: [c.dis_share for c in cells], RESIDUAL: [c.res_share for c in cells],
    }
    drawn = {style: sorted(s for s in values if s) for style, values in shares.items()}
    assert sum(map(len, drawn.values())) > len(cells)  # cells with errors in more than one bin
    for style, expected in drawn.items():
        if not expected:
            assert style.hatch not in shapes  # a bin no cell has draws nothing
            continue
        shape = shapes[style.hatch]
        corners = shape.get_path().vertices.reshape(-1, 5, 2)
        assert shape.get_facecolor()[:3] == pytest.approx(to_rgb(style.colour))
        assert sorted(corners[:, 2, 1] - corners[:, 0, 1]) == pytest.approx(expected)


def test_bins_differ_in_hatching_and_in_grey() -> None:
    """Each bin has its own hatching (or none) and a luminance far from the others'."""
    styles = (IRREVERSIBLE, RECOVERABLE, RESIDUAL)
    assert len({s.hatch for s in styles}) == 3

    def grey(colour: str) -> float:
        r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
        return 0.299 * r + 0.587 * g + 0.114 * b

    greys = sorted(grey(s.colour) for s in styles)
    assert min(b - a for a, b in itertools.pairwise(greys)) > 40
