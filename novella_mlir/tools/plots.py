"""Plots of compiled models across lengths, with matplotlib.

Figures are built with the object API (`matplotlib.figure.Figure`, rendered
by Agg), so nothing here needs a display or touches pyplot's global state;
in Jupyter a returned figure shows inline. Every function takes plain arrays
(or `RunStats` / trace dicts) so it does not depend on how they were made,
and draws into `ax` when given, else into a new figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure

TRACK_ORDER = ("DMA load", "matrix", "vector", "DMA store")


def _axes(ax, figsize=(6.4, 4.0)):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def cycles_vs_length(lengths, cycles, *, roofline=None, ax=None, label: str = "simulated", symbol: str = "T"):
    """Simulated cycles per length (and the roofline bound per length if given)."""
    fig, ax = _axes(ax)
    ax.plot(lengths, cycles, "o-", label=label)
    if roofline is not None:
        ax.plot(lengths, roofline, "--", color="gray", label="roofline bound")
    ax.set_xlabel(f"length {symbol}")
    ax.set_ylabel("cycles")
    ax.set_title("cycles vs length")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def series_vs_length(
    lengths,
    series: Mapping[str, Sequence],
    *,
    ylabel: str,
    title: str = "",
    ax=None,
    logy: bool = False,
    symbol: str = "T",
):
    """One line per named series over the lengths (e.g. static / per-length / jit)."""
    fig, ax = _axes(ax)
    for name, values in series.items():
        ax.plot(lengths, values, "o-", label=name)
    ax.set_xlabel(f"length {symbol}")
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title or f"{ylabel} vs length")
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def words_vs_length(lengths, series: Mapping[str, Sequence], *, ax=None, logy: bool = True):
    """Instruction words each mode must store or produce per length: static / per-length / jit."""
    return series_vs_length(
        lengths, series, ylabel="instruction words", ax=ax, logy=logy, title="instruction words vs length"
    )


def _stat(s, name: str) -> float:
    return s[name] if isinstance(s, Mapping) else getattr(s, name)


def roofline(stats: Sequence, labels: Sequence[str], *, macs_per_cycle: int, dram_bytes_per_cycle: int, ax=None):
    """Achieved MACs/cycle against operational intensity (MACs per DRAM byte), under the roofs.

    `stats` are `RunStats` or their `to_dict()`; one point per run."""
    fig, ax = _axes(ax)
    intensity = np.array(
        [_stat(s, "macs") / max(_stat(s, "dma_bytes_loaded") + _stat(s, "dma_bytes_stored"), 1) for s in stats]
    )
    achieved = np.array([_stat(s, "macs") / max(_stat(s, "cycles"), 1) for s in stats])
    lo, hi = min(intensity.min(), 0.1) / 2, max(intensity.max(), macs_per_cycle / dram_bytes_per_cycle) * 4
    x = np.geomspace(lo, hi, 200)
    ax.plot(x, np.minimum(macs_per_cycle, dram_bytes_per_cycle * x), color="black", label="roofline")
    colors = [f"C{i % 10}" for i in range(len(stats))]
    for xi, yi, text, color in zip(intensity, achieved, labels, colors):
        ax.scatter([xi], [yi], zorder=3, color=color, label=text)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (MAC / DRAM byte)")
    ax.set_ylabel("MAC / cycle")
    ax.set_title("utilization vs roofline")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncols=2)
    return fig


def utilization_vs_length(lengths, stats: Sequence, *, ax=None, symbol: str = "T"):
    """MAC utilization and roofline efficiency (achieved / bound) per length."""
    series = {
        "MAC utilization": [_stat(s, "mac_utilization") for s in stats],
        "roofline efficiency": [_stat(s, "roofline_efficiency") for s in stats],
    }
    fig = series_vs_length(lengths, series, ylabel="fraction", ax=ax, symbol=symbol, title="utilization vs length")
    fig.axes[0].set_ylim(0, 1.05)
    return fig


def _trace_events(trace) -> list[dict]:
    d = trace.to_dict() if hasattr(trace, "to_dict") else trace
    return d["traceEvents"] if isinstance(d, Mapping) else list(d)


def track_names(trace) -> dict[int, str]:
    """tid -> track label, from the trace's thread_name metadata."""
    return {e["tid"]: e["args"]["name"] for e in _trace_events(trace) if e.get("name") == "thread_name"}


def timeline(trace, *, ax=None, start_us: float = 0.0, end_us: float | None = None):
    """A Gantt chart of one run: one row per unit, instruction spans colored, token waits hatched."""
    fig, ax = _axes(ax, figsize=(9.0, 2.8))
    names = track_names(trace)
    rows = sorted(names, key=lambda t: TRACK_ORDER.index(names[t]) if names[t] in TRACK_ORDER else 99)
    colors = dict(zip(rows, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    spans = [e for e in _trace_events(trace) if e.get("ph") == "X"]
    end_us = end_us if end_us is not None else max((e["ts"] + e["dur"] for e in spans), default=1.0)
    for row, tid in enumerate(rows):
        mine = [e for e in spans if e["tid"] == tid and e["ts"] < end_us and e["ts"] + e["dur"] > start_us]
        busy = [(e["ts"], e["dur"]) for e in mine if not e["name"].startswith("wait")]
        waits = [(e["ts"], e["dur"]) for e in mine if e["name"].startswith("wait")]
        ax.broken_barh(busy, (row - 0.35, 0.7), facecolors=colors.get(tid, "gray"))
        ax.broken_barh(waits, (row - 0.2, 0.4), facecolors="none", edgecolors="gray", hatch="///", linewidth=0)
    ax.set_yticks(range(len(rows)), [names[t] for t in rows])
    ax.invert_yaxis()
    ax.set_xlim(start_us, end_us)
    ax.set_xlabel("time (us)")
    ax.set_title("timeline (hatched: waiting for a token)")
    return fig
