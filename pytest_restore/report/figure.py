"""The decomposition figure: three-bin shares per policy and budget, as stacked bars.

Each bar is one cell of the chosen regime (the top-k regime (b) by default):
its oracle-answerable policy errors split into irreversible, recoverable and
residual shares (``irr/err``, ``rec/err``, ``res/err``), so a bar with errors
reaches 1. Bars are grouped by policy, budgets from loose to tight inside a
group. One panel per reader.

The figure is drawn on a bare ``matplotlib.figure.Figure`` with the Agg
canvas: no pyplot global state and no dependence on the session's backend.
The SVG is deterministic (fixed hash salt for element ids, no date), so that
two runs over the same records write identical files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from pytest_restore.stats.results import budget_label

#: Bin colours, the paper's palette.
IRREVERSIBLE = "#B2182B"
RECOVERABLE = "#2166AC"
RESIDUAL = "#595959"

_BAR_WIDTH = 0.8
_GROUP_GAP = 0.8  # extra space between policy groups, in bar widths
_LABEL_MIN = 0.07  # segments thinner than this get no percentage label


class BarCell(Protocol):
    """What a bar needs from a cell; :class:`pytest_restore.stats.results.CellStats` has it."""

    @property
    def policy(self) -> str: ...
    @property
    def budget(self) -> int: ...
    @property
    def regime(self) -> str: ...
    @property
    def reader(self) -> str: ...
    @property
    def err(self) -> int: ...
    @property
    def irr_share(self) -> float | None: ...
    @property
    def rec_share(self) -> float | None: ...
    @property
    def res_share(self) -> float | None: ...
    @property
    def seeds(self) -> tuple[int, ...]: ...


REGIME_TITLES = {"a": "regime (a): forced surviving gold", "b": "regime (b): top-k retrieval"}


#: Width of a paper's text column (inches): the figure is drawn at its printed size,
#: so its smallest text (7 pt) stays readable without scaling.
COLUMN_WIDTH = 6.75


def write_figure(
    cells: Sequence[BarCell],
    out_dir: str | os.PathLike[str],
    *,
    regime: str = "b",
    dataset: str = "",
) -> tuple[Path, Path]:
    """Write ``figure.png`` and ``figure.svg`` into ``out_dir``; return their paths.

    ``dataset`` (e.g. ``"embedded synthetic LongMemEval-S, 100 questions"``)
    goes into each panel's title with the panel's reader.
    """
    chosen = [c for c in cells if c.regime == regime]
    readers = sorted({c.reader for c in chosen}) or [""]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    with matplotlib.rc_context(
        {
            "svg.hashsalt": "pytest-restore",
            "font.size": 8,
            "axes.titlesize": 8,
            "axes.labelsize": 8,
            "xtick.labelsize": 7,
            "ytick.labelsize": 7,
            "legend.fontsize": 7,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    ):
        figure = Figure(figsize=(COLUMN_WIDTH, 2.9 * len(readers) + 0.4), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(readers), 1, squeeze=False)[:, 0]
        for ax, reader in zip(axes, readers):
            _draw_panel(ax, [c for c in chosen if c.reader == reader])
            title = REGIME_TITLES.get(regime, f"regime ({regime})")
            about = "; ".join(x for x in (f"reader {reader}" if reader else "", dataset) if x)
            ax.set_title(f"{title}" + (f" ({about})" if about else ""), loc="left")
        figure.legend(
            handles=[
                Patch(color=IRREVERSIBLE, label="irreversible (gold evicted; restore fixes)"),
                Patch(color=RECOVERABLE, label="recoverable (gold kept; not retrieved)"),
                Patch(color=RESIDUAL, label="residual (wrong with gold restored)"),
            ],
            loc="outside upper center",
            ncols=3,
            frameon=False,
        )
        png, svg = out / "figure.png", out / "figure.svg"
        figure.savefig(png, dpi=300, metadata={"Software": None})
        figure.savefig(svg, metadata={"Date": None})
    return png, svg


def _draw_panel(ax: Axes, cells: Sequence[BarCell]) -> None:
    """Stacked bars for one reader's cells (in the analysis's cell order), grouped by policy."""
    policies = list(dict.fromkeys(c.policy for c in cells))
    positions: list[float] = []
    budget_labels: list[str] = []
    x = 0.0
    for policy in policies:
        group = [c for c in cells if c.policy == policy]
        start = x
        for cell in group:
            _draw_bar(ax, x, cell)
            positions.append(x)
            budget_labels.append(budget_label(cell.budget))
            x += 1.0
        # The policy name sits centred under its group, below the budget labels; a
        # policy run under several seeds (random) says that its bars pool them.
        seeds = sorted({seed for c in group for seed in c.seeds})
        name = policy if len(seeds) < 2 else f"{policy}\n(seeds {','.join(map(str, seeds))} pooled)"
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
        x += _GROUP_GAP
    ax.set_xticks(positions, budget_labels)
    ax.tick_params(axis="x", length=0)
    ax.set_xlim(-0.6, max(x - _GROUP_GAP - 0.4, 0.6))
    ax.set_ylim(0.0, 1.1)
    ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    ax.set_ylabel("share of the cell's errors")
    ax.set_xlabel("store budget (tokens), per policy; number above a bar: its errors", labelpad=26)
    ax.grid(axis="y", linewidth=0.5, alpha=0.4)
    ax.set_axisbelow(True)


def _draw_bar(ax: Axes, x: float, cell: BarCell) -> None:
    """One stacked bar with percentage labels and the error count on top."""
    if not cell.err:
        ax.text(x, 0.02, "no errors", rotation=90, ha="center", va="bottom", fontsize=7)
        return
    bottom = 0.0
    for share, colour in (
        (cell.irr_share, IRREVERSIBLE),
        (cell.rec_share, RECOVERABLE),
        (cell.res_share, RESIDUAL),
    ):
        height = share or 0.0
        ax.bar(x, height, _BAR_WIDTH, bottom=bottom, color=colour, edgecolor="white", linewidth=0.5)
        if height >= _LABEL_MIN:
            ax.text(
                x,
                bottom + height / 2.0,
                f"{round(100 * height)}%",
                ha="center",
                va="center",
                color="white",
                fontsize=7,
            )
        bottom += height
    ax.text(x, bottom + 0.01, f"{cell.err}", ha="center", va="bottom", fontsize=7)
