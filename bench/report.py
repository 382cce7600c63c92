"""Figures, their statistics and targets, and the Markdown table and JSON they end up in."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between closest ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


#: A target is checked against the figure: its median, p99, floor or failures.
Check = Callable[["Figure"], bool]


@dataclass
class Figure:
    """One row of the table: samples, the floor measured beside them, and the target."""

    key: str
    title: str
    unit: str
    samples: list[float]
    floor: list[float] = field(default_factory=list)
    target: str = "—"
    check: Check | None = None
    #: For throughputs the "p99" column shows the slowest round instead.
    higher_is_better: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: Answers that were not what the figure expects (a non-200, no answer): any fails it.
    failures: int = 0

    @property
    def median(self) -> float:
        return median(self.samples)

    @property
    def p99(self) -> float:
        if self.higher_is_better:
            return min(self.samples) if self.samples else math.nan
        return percentile(self.samples, 99)

    @property
    def floor_median(self) -> float:
        return median(self.floor)

    @property
    def ratio(self) -> float:
        """The figure's median over its floor's median (NaN without a floor)."""
        if not self.floor or not self.samples or self.floor_median == 0:
            return math.nan
        return self.median / self.floor_median

    @property
    def met(self) -> bool | None:
        if self.check is None or not self.samples:
            return None
        return self.failures == 0 and self.check(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "title": self.title,
            "unit": self.unit,
            "n": len(self.samples),
            "median": _finite(self.median),
            "p99" if not self.higher_is_better else "worst_round": _finite(self.p99),
            "floor_n": len(self.floor),
            "floor_median": _finite(self.floor_median),
            "ratio": _finite(self.ratio),
            "target": self.target,
            "met": self.met,
            "failures": self.failures,
            "error": self.error,
            "samples": [round(s, 4) for s in self.samples],
            "floor": [round(s, 4) for s in self.floor],
            "detail": self.detail,
        }


def at_most(p50: float | None = None, p99: float | None = None) -> Check:
    """A latency target: median and/or p99 at most these values."""

    def check(figure: Figure) -> bool:
        return (p50 is None or figure.median <= p50) and (p99 is None or figure.p99 <= p99)

    return check


def at_least(value: float) -> Check:
    """The median at least ``value`` (a throughput, a speed-up)."""
    return lambda figure: figure.median >= value


def floor_ratio_at_least(value: float) -> Check:
    """The median at least ``value`` times the floor's median (a rate beside RQ's own)."""
    return lambda figure: figure.ratio >= value


def at_most_over_floor(value: float) -> Check:
    """The median at most ``value`` above the floor's median (a delay beside one it adds to)."""
    return lambda figure: figure.median - figure.floor_median <= value


def exactly(value: float) -> Check:
    return lambda figure: figure.median == value and figure.p99 == value


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def _number(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.1f} ms" if value < 100 else f"{value:,.0f} ms"
    return f"{value:.2f}"


def table(figures: Sequence[Figure]) -> str:
    """The Markdown table printed at the end of a run."""
    lines = [
        "| # | figure | n | median | p99 | floor median | ratio | target | met? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in figures:
        if f.error is not None:
            lines.append(f"| {f.key} | {f.title} | | crashed: {f.error} | | | | {f.target} | — |")
            continue
        high = _number(f.p99, f.unit) + (" (worst)" if f.higher_is_better else "")
        ratio = "—" if math.isnan(f.ratio) else f"{f.ratio:.2f}x"
        met = {True: "yes", False: "**no**", None: "—"}[f.met]
        if f.failures:
            met += f" ({f.failures} failed)"
        lines.append(
            f"| {f.key} | {f.title} | {len(f.samples)} | {_number(f.median, f.unit)} | {high} "
            f"| {_number(f.floor_median, f.unit)} | {ratio} | {f.target} | {met} |"
        )
    return "\n".join(lines)


def write_json(path: Path, figures: Sequence[Figure], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**meta, "figures": [f.as_json() for f in figures]}
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
