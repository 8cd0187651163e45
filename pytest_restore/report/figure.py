"""The report's figure: the findings' headline quantity with its intervals, then the bins.

Two panels per reader, both of the top-k regime (b) by default:

- **the headline** (top): for every evicting policy (the policies the findings
  lead with: every one but the reference and the control) and budget, the
  irreversible share of the errors a restore fixes, ``irr / (irr + rec)``,
  drawn as a bar split into its irreversible and recoverable parts, with the
  analysis's bootstrap interval as a whisker at the split and the share and
  interval written above the bar. A dashed line marks 0.5 (a majority);
- **the decomposition** (bottom): every policy's errors split into
  irreversible, recoverable and residual shares (``irr/err``, ``rec/err``,
  ``res/err``) as stacked bars, the cell's error count above each.

Bars are grouped by policy, budgets from loose to tight inside a group. Every
figure is read off the :class:`~pytest_restore.stats.findings.Findings`
(its analysis's cells, its evicting policies); nothing is recomputed here.
The bins differ in hatching as well as colour,
and their colours (Paul Tol's high-contrast scheme) stay three distinct greys
when printed in black and white and distinct to red-green colour-blind readers.

The figure is drawn on a bare ``matplotlib.figure.Figure`` with the Agg
canvas: no pyplot global state and no dependence on the session's backend.
The SVG is deterministic (fixed hash salt for element ids, no date), so that
two runs over the same records write identical files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib import patheffects
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path as DrawnPath

from pytest_restore.report.inputs import short
from pytest_restore.stats.findings import Findings
from pytest_restore.stats.results import CellStats, budget_label


@dataclass(frozen=True)
class BinStyle:
    """How one bin is drawn: fill, hatching and the colour of text written on it."""

    label: str
    colour: str
    hatch: str
    text: str


#: The bins' styles. Greyscale luminance: irreversible ~117, recoverable ~55, residual ~204.
IRREVERSIBLE = BinStyle("irreversible (gold evicted; restore fixes)", "#BB5566", "////", "white")
RECOVERABLE = BinStyle("recoverable (gold kept; not retrieved)", "#004488", "....", "white")
DISTORTED = BinStyle("distorted (gold kept in a memory without the answer)", "#DDAA33", "xxxx", "black")
RESIDUAL = BinStyle("residual (wrong with gold restored)", "#DDDDDD", "", "black")

_BAR_WIDTH = 0.8
_GROUP_GAP = 0.8  # extra space between policy groups, in bar widths
_HEADLINE_GAP = 0.5  # the headline's groups sit closer: its labels need the room
_LABEL_MIN = 0.09  # segments thinner than this get no percentage label

REGIME_TITLES = {"a": "regime (a): forced surviving gold", "b": "regime (b): top-k retrieval"}

#: Width of a paper's text column (inches): the figure is drawn at its printed size,
#: so its smallest text (6 pt) stays readable without scaling.
COLUMN_WIDTH = 6.75


@dataclass(frozen=True)
class HeadlineBar:
    """One bar of the headline panel: a cell's two-bin share and its interval, as the analysis has them."""

    policy: str
    budget: int
    reader: str
    share: float | None
    lo: float | None
    hi: float | None

    @property
    def label(self) -> str:
        """The share and its interval as the findings write them (``0.91`` over ``.77-1.00``)."""
        if self.share is None:
            return "no restorable error"
        interval = (
            "" if self.lo is None or self.hi is None else f"\n{short(self.lo)}-{short(self.hi)}"
        )
        return f"{self.share:.2f}{interval}"


def headline_bars(findings: Findings, reader: str, regime: str = "b") -> list[HeadlineBar]:
    """The headline panel's bars for one reader: the evicting policies' cells, in the analysis's order."""
    policies = set(findings.evicting)
    return [
        HeadlineBar(c.policy, c.budget, c.reader, c.two_bin_share, c.two_bin_lo, c.two_bin_hi)
        for c in _cells(findings, reader, regime)
        if c.policy in policies
    ]


def left_out_line(findings: Findings, reader: str, regime: str, bars: Sequence[HeadlineBar]) -> str:
    """The headline panel's word on the policies it leaves out (the reference, the control), which the
    panel below shows: a new line of its title, or "" when it leaves none out."""
    shown = {bar.policy for bar in bars}
    left = [c.policy for c in _cells(findings, reader, regime) if c.policy not in shown]
    if not left:
        return ""
    st = findings.analysis.settings
    roles = {st.reference: "the reference", st.control: "the positive control"}
    named = [f"{p} ({roles[p]})" if p in roles else p for p in dict.fromkeys(left)]
    return f"\nleft out here, in the panel below: {', '.join(named)}"


def _cells(findings: Findings, reader: str, regime: str) -> list[CellStats]:
    """One reader's cells of a regime under the run's (baseline) ranker, in the analysis's order."""
    return [c for c in findings.analysis.cells if c.regime == regime and c.reader == reader and not c.ranker]


def draw_figure(findings: Findings, *, regime: str = "b", dataset: str = "", simulated: str = "") -> Figure:
    """The figure, drawn (two panels per reader); :func:`write_figure` saves it.

    ``simulated`` names the fake models that took part (``"reader fake, judge fake"``; empty: none): the
    figure's title then opens with SIMULATED, so the caveat goes wherever the figure is pasted.
    """
    readers = sorted({c.reader for c in findings.analysis.cells if c.regime == regime}) or [""]
    with _style():
        figure = Figure(figsize=(COLUMN_WIDTH, 5.4 * len(readers) + 0.4), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.subplots(
            2 * len(readers), 1, squeeze=False, height_ratios=[1.0, 1.1] * len(readers)
        )[:, 0]
        title = REGIME_TITLES.get(regime, f"regime ({regime})")
        for i, reader in enumerate(readers):
            about = "; ".join(x for x in (f"reader {reader}" if reader else "", dataset) if x)
            top, bottom = axes[2 * i], axes[2 * i + 1]
            bars = headline_bars(findings, reader, regime)
            _draw_headline(top, bars)
            top.set_title(
                (f"SIMULATED: fake models ({simulated}), not a finding about any model\n" if simulated else "")
                + "Irreversible share of the errors a restore fixes, irr / (irr + rec), with 95% intervals\n"
                f"{title}" + (f" ({about})" if about else "") + left_out_line(findings, reader, regime, bars),
                loc="left",
            )
            _draw_decomposition(bottom, _cells(findings, reader, regime))
            bottom.set_title(
                "Every error of a cell in its bin (shares of the cell's errors)", loc="left"
            )
        figure.legend(
            handles=[
                Patch(facecolor=s.colour, hatch=s.hatch, edgecolor=_hatch_colour(s), label=s.label)
                for s in (IRREVERSIBLE, RECOVERABLE, DISTORTED, RESIDUAL)
            ],
            loc="outside upper center",
            ncols=2,
            frameon=False,
            handleheight=1.4,
            handlelength=2.2,
        )
    return figure


def write_figure(
    findings: Findings,
    out_dir: str | os.PathLike[str],
    *,
    regime: str = "b",
    dataset: str = "",
    simulated: str = "",
) -> tuple[Path, Path]:
    """Write ``figure.png`` and ``figure.svg`` into ``out_dir``; return their paths.

    ``dataset`` (e.g. ``"embedded synthetic LongMemEval-S, 100 questions"``)
    goes into the title with the panel's reader; ``simulated``: as :func:`draw_figure`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figure = draw_figure(findings, regime=regime, dataset=dataset, simulated=simulated)
    png, svg = out / "figure.png", out / "figure.svg"
    with _style():
        # lay the figure out once, then keep it: each save would otherwise run the constrained
        # layout again at its own resolution, a third of the time the two saves take
        figure.draw_without_rendering()
        figure.set_layout_engine(None)
        figure.savefig(png, dpi=300, metadata={"Software": None})
        figure.savefig(svg, metadata={"Date": None})
    return png, svg


def _style() -> AbstractContextManager[None]:
    """The figure's text sizes and look, applied while it is drawn and saved."""
    return matplotlib.rc_context(
        {
            "svg.hashsalt": "pytest-restore",
            # every text drawn is plain: a policy or reader name is the user's, and "$" in it
            # would otherwise be read as mathtext (and a name that is not valid TeX fails the draw)
            "text.parse_math": False,
            "font.size": 8,
            "axes.titlesize": 8,
            "axes.labelsize": 8,
            "xtick.labelsize": 7,
            "ytick.labelsize": 7,
            "legend.fontsize": 7,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "hatch.linewidth": 0.6,
        }
    )


def _hatch_colour(style: BinStyle) -> str:
    """Hatching is drawn in the edge colour: light lines on the dark fills."""
    return "#FFFFFF" if style.text == "white" else "#888888"


class _Fills:
    """The hatched fills of one panel, drawn as one shape per bin.

    Agg draws a hatched shape by rendering its hatch tile (a square the size
    of an inch at the figure's resolution) afresh: a bar per segment made that
    tile over and over, half the time a 300-dpi PNG took. The bars of a bin do
    not overlap and the tile is anchored to the canvas, so one shape of all of
    them is drawn the same. The fills go under the bars' outlines and labels.
    """

    def __init__(self) -> None:
        self.bars: dict[BinStyle, list[tuple[float, float, float]]] = {}

    def add(self, x: float, bottom: float, height: float, style: BinStyle) -> None:
        """A bar of ``style`` centred on ``x``, from ``bottom`` up by ``height``."""
        if height > 0.0:
            self.bars.setdefault(style, []).append((x, bottom, height))

    def draw(self, ax: Axes) -> None:
        """Add each bin's fills to ``ax``, in the order the bins were first used."""
        half = _BAR_WIDTH / 2.0
        for style, bars in self.bars.items():
            shape = DrawnPath.make_compound_path(*(
                DrawnPath([(x - half, y), (x + half, y), (x + half, y + h), (x - half, y + h), (x - half, y)], closed=True)
                for x, y, h in bars
            ))
            ax.add_patch(PathPatch(
                shape, facecolor=style.colour, hatch=style.hatch, edgecolor=_hatch_colour(style), linewidth=0.0,
                zorder=0.9,
            ))


def _segment(ax: Axes, fills: _Fills, x: float, bottom: float, height: float, style: BinStyle) -> None:
    """One bin's part of a bar, with its percentage written on it where it has room."""
    if height <= 0.0:
        return
    fills.add(x, bottom, height, style)
    ax.bar(x, height, _BAR_WIDTH, bottom=bottom, fill=False, edgecolor="white", linewidth=0.5)
    if height >= _LABEL_MIN:
        ax.text(
            x,
            bottom + height / 2.0,
            f"{round(100 * height)}%",
            ha="center",
            va="center",
            color=style.text,
            fontsize=6.5,
            bbox={"boxstyle": "round,pad=0.12", "facecolor": style.colour, "edgecolor": "none"},
        )


def _groups(
    ax: Axes, keys: Sequence[tuple[str, int]], seeds: dict[str, list[int]], gap: float = _GROUP_GAP
) -> list[float]:
    """Each (policy, budget)'s x position; the budget under its bar, the policy under its group."""
    positions: list[float] = []
    x = 0.0
    for policy in dict.fromkeys(p for p, _ in keys):
        start = x
        for key in keys:
            if key[0] == policy:
                positions.append(x)
                x += 1.0
        pooled = seeds.get(policy, [])
        name = (
            policy if len(pooled) < 2 else f"{policy}\n(seeds {','.join(map(str, pooled))} pooled)"
        )
        ax.annotate(
            name,
            xy=((start + x - 1.0) / 2.0, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -12),
            textcoords="offset points",
            ha="center",
            va="top",
            fontweight="bold",
        )
        x += gap
    ax.set_xticks(positions, [budget_label(b) for _, b in keys])
    ax.tick_params(axis="x", length=0)
    ax.set_xlim(-0.6, max(x - gap - 0.4, 0.6))
    ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    ax.grid(axis="y", linewidth=0.5, alpha=0.4)
    ax.set_axisbelow(True)
    return positions


def _draw_headline(ax: Axes, bars: Sequence[HeadlineBar]) -> None:
    """The two-bin share per cell: irreversible below the split, recoverable above, the interval at the split."""
    positions = _groups(ax, [(b.policy, b.budget) for b in bars], {}, gap=_HEADLINE_GAP)
    fills = _Fills()
    for x, bar in zip(positions, bars):
        if bar.share is None:
            ax.text(x, 0.02, bar.label, rotation=90, ha="center", va="bottom", fontsize=6.5)
            continue
        fills.add(x, 0.0, bar.share, IRREVERSIBLE)
        fills.add(x, bar.share, 1.0 - bar.share, RECOVERABLE)
        if bar.lo is not None and bar.hi is not None:
            whisker = ax.errorbar(
                x,
                bar.share,
                yerr=[[bar.share - bar.lo], [bar.hi - bar.share]],
                fmt="o",
                color="black",
                markerfacecolor="white",
                markersize=3.5,
                elinewidth=1.4,
                capsize=4,
                capthick=1.4,
                label=f"{bar.policy} {budget_label(bar.budget)} {bar.reader}",
            )
            halo: list[patheffects.AbstractPathEffect] = [  # a white halo: legible on either fill
                patheffects.withStroke(linewidth=3.2, foreground="white")
            ]
            for artist in whisker.lines[1] + whisker.lines[2]:
                artist.set_path_effects(halo)
        ax.text(x, 1.03, bar.label, ha="center", va="bottom", fontsize=6, linespacing=1.1)
    fills.draw(ax)
    ax.axhline(0.5, color="black", linestyle=(0, (4, 3)), linewidth=0.8)
    ax.set_ylim(0.0, 1.25)
    ax.set_ylabel("irr / (irr + rec)")
    ax.set_xlabel(
        "store budget (tokens), per evicting policy; above a bar: the share and its 95% interval;"
        " dashed: 0.5",
        labelpad=18,
    )


def _draw_decomposition(ax: Axes, cells: Sequence[CellStats]) -> None:
    """Stacked bin bars for one reader's cells (in the analysis's cell order), grouped by policy."""
    seeds: dict[str, list[int]] = {}
    for cell in cells:
        seeds.setdefault(cell.policy, [])
        seeds[cell.policy] = sorted(set(seeds[cell.policy]) | set(cell.seeds))
    positions = _groups(ax, [(c.policy, c.budget) for c in cells], seeds)
    fills = _Fills()
    for x, cell in zip(positions, cells):
        if not cell.err:
            ax.text(x, 0.02, "no errors", rotation=90, ha="center", va="bottom", fontsize=7)
            continue
        bottom = 0.0
        for share, style in (
            (cell.irr_share, IRREVERSIBLE),
            (cell.rec_share, RECOVERABLE),
            (cell.dis_share, DISTORTED),
            (cell.res_share, RESIDUAL),
        ):
            _segment(ax, fills, x, bottom, share or 0.0, style)
            bottom += share or 0.0
        ax.text(x, bottom + 0.01, f"{cell.err}", ha="center", va="bottom", fontsize=7)
    fills.draw(ax)
    ax.set_ylim(0.0, 1.1)
    ax.set_ylabel("share of the cell's errors")
    ax.set_xlabel("store budget (tokens), per policy; number above a bar: its errors", labelpad=26)
