"""Run statistics and roofline numbers."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .units import CHANNELS

UNITS = ("load", "matrix", "vector", "store")


def _waits() -> dict[str, dict[str, int]]:
    return {ch: {"count": 0, "cycles": 0} for ch in CHANNELS}


@dataclass
class RunStats:
    clock_ghz: float
    macs_per_cycle: int
    dram_bytes_per_cycle: int
    cycles: int = 0
    instructions: int = 0
    by_mnemonic: Counter = field(default_factory=Counter)
    by_vec_fn: Counter = field(default_factory=Counter)
    dma_bytes_loaded: int = 0
    dma_bytes_stored: int = 0
    macs: int = 0
    busy: dict[str, int] = field(default_factory=lambda: dict.fromkeys(UNITS, 0))
    dram_busy: int = 0  # cycles the DRAM channel carries data (DMA data phases, whole bursts)
    token_waits: dict[str, dict[str, int]] = field(default_factory=_waits)

    @property
    def wall_time_us(self) -> float:
        return self.cycles / (self.clock_ghz * 1000.0)

    @property
    def compute_bound_cycles(self) -> float:
        return self.macs / self.macs_per_cycle

    @property
    def memory_bound_cycles(self) -> float:
        return (self.dma_bytes_loaded + self.dma_bytes_stored) / self.dram_bytes_per_cycle

    @property
    def roofline_cycles(self) -> float:
        return max(self.compute_bound_cycles, self.memory_bound_cycles)

    @property
    def busy_fraction(self) -> dict[str, float]:
        """Each unit's busy cycles over the run's, and the DRAM channel's (`dram`): 1 - dram is its idle share."""
        busy = {**self.busy, "dram": self.dram_busy}
        return {u: (c / self.cycles if self.cycles else 0.0) for u, c in busy.items()}

    @property
    def mac_utilization(self) -> float:
        return self.macs / (self.macs_per_cycle * self.cycles) if self.cycles else 0.0

    @property
    def roofline_efficiency(self) -> float:
        return self.roofline_cycles / self.cycles if self.cycles else 0.0

    def to_dict(self) -> dict:
        return {
            "cycles": self.cycles,
            "wall_time_us": self.wall_time_us,
            "instructions": self.instructions,
            "by_mnemonic": dict(self.by_mnemonic),
            "by_vec_fn": dict(self.by_vec_fn),
            "dma_bytes_loaded": self.dma_bytes_loaded,
            "dma_bytes_stored": self.dma_bytes_stored,
            "macs": self.macs,
            "busy": dict(self.busy),
            "dram_busy": self.dram_busy,
            "busy_fraction": self.busy_fraction,
            "token_waits": {k: dict(v) for k, v in self.token_waits.items()},
            "compute_bound_cycles": self.compute_bound_cycles,
            "memory_bound_cycles": self.memory_bound_cycles,
            "roofline_cycles": self.roofline_cycles,
            "mac_utilization": self.mac_utilization,
            "roofline_efficiency": self.roofline_efficiency,
            "clock_ghz": self.clock_ghz,
        }

    def to_json(self, path: str | Path | None = None) -> str:
        """JSON text of `to_dict()`; also written to `path` if given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text)
        return text

    def __str__(self) -> str:
        rows = [
            ("cycles", f"{self.cycles}  ({self.wall_time_us:.3f} us)"),
            ("instructions", f"{self.instructions}  {dict(self.by_mnemonic)}"),
            ("vec functions", str(dict(self.by_vec_fn))),
            (
                "DMA loaded / stored",
                f"{self.dma_bytes_loaded} / {self.dma_bytes_stored} B",
            ),
            ("MACs", str(self.macs)),
            ("busy cycles", ", ".join(f"{u}={c}" for u, c in {**self.busy, "dram": self.dram_busy}.items())),
            ("busy fraction", ", ".join(f"{u}={f:.1%}" for u, f in self.busy_fraction.items())),
            ("token waits", self._waits_str()),
            (
                "roofline cycles",
                (
                    f"{self.roofline_cycles:.0f}  "
                    f"(compute {self.compute_bound_cycles:.0f}, "
                    f"memory {self.memory_bound_cycles:.0f})"
                ),
            ),
            ("MAC utilization", f"{self.mac_utilization:.1%}"),
            ("roofline efficiency", f"{self.roofline_efficiency:.1%}"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def _waits_str(self) -> str:
        parts = [f"{ch}={w['count']}x/{w['cycles']}cy" for ch, w in self.token_waits.items() if w["count"]]
        return ", ".join(parts) or "none"
