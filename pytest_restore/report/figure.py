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

from pytest_restore.stats.analysis import budget_label, policy_sort_key

#: Bin colours, the paper's palette.
IRREVERSIBLE = "#B2182B"
RECOVERABLE = "#2166AC"
RESIDUAL = "#595959"

_BAR_WIDTH = 0.8
_GROUP_GAP = 0.8  # extra space between policy groups, in bar widths
_LABEL_MIN = 0.07  # segments thinner than this get no percentage label


class BarCell(Protocol):
    """What a bar needs from a cell; :class:`pytest_restore.stats.analysis.CellStats` has it."""

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


REGIME_TITLES = {"a": "regime (a): forced surviving gold", "b": "regime (b): top-k retrieval"}


def write_figure(
    cells: Sequence[BarCell],
    out_dir: str | os.PathLike[str],
    *,
    regime: str = "b",
) -> tuple[Path, Path]:
    """Write ``figure.png`` and ``figure.svg`` into ``out_dir``; return their paths."""
    chosen = [c for c in cells if c.regime == regime]
    readers = sorted({c.reader for c in chosen}) or [""]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    with matplotlib.rc_context(
        {
            "svg.hashsalt": "pytest-restore",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    ):
        figure = Figure(figsize=(10.0, 3.6 * len(readers)), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.subplots(len(readers), 1, squeeze=False)[:, 0]
        for ax, reader in zip(axes, readers):
            _draw_panel(ax, [c for c in chosen if c.reader == reader])
            title = REGIME_TITLES.get(regime, f"regime ({regime})")
            if len(readers) > 1:
                title += f", reader {reader}"
            ax.set_title(
                f"{title}; each bar splits the n oracle-answerable policy errors of one cell",
                loc="left",
            )
        figure.legend(
            handles=[
                Patch(color=IRREVERSIBLE, label="irreversible (evicted gold; restore fixes)"),
                Patch(color=RECOVERABLE, label="recoverable (gold kept; retrieval missed)"),
                Patch(color=RESIDUAL, label="residual (wrong even with gold restored)"),
            ],
            loc="outside upper center",
            ncols=3,
            frameon=False,
        )
        png, svg = out / "figure.png", out / "figure.svg"
        figure.savefig(png, dpi=150, metadata={"Software": None})
        figure.savefig(svg, metadata={"Date": None})
    return png, svg


def _draw_panel(ax: Axes, cells: Sequence[BarCell]) -> None:
    """Stacked bars for one reader's cells, grouped by policy."""
    policies = sorted({c.policy for c in cells}, key=policy_sort_key)
    positions: list[float] = []
    budget_labels: list[str] = []
    x = 0.0
    for policy in policies:
        group = sorted((c for c in cells if c.policy == policy), key=lambda c: -c.budget)
        start = x
        for cell in group:
            _draw_bar(ax, x, cell)
            positions.append(x)
            budget_labels.append(budget_label(cell.budget))
            x += 1.0
        # The policy name sits centred under its group, below the budget labels.
        ax.annotate(
            policy,
            xy=((start + x - 1.0) / 2.0, 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -22),
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
    ax.set_ylabel("share of errors")
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
    ax.text(x, bottom + 0.01, f"n={cell.err}", ha="center", va="bottom", fontsize=6.5)
