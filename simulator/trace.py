"""Chrome / Perfetto trace-event export of a run."""

from __future__ import annotations

import json
from pathlib import Path

TRACKS = {
    "load": "DMA load",
    "matrix": "matrix",
    "vector": "vector",
    "store": "DMA store",
}
_PID = 1


class Trace:
    """Collects complete ("X") events; times are cycles converted to µs."""

    def __init__(self, clock_ghz: float):
        self.cycles_per_us = clock_ghz * 1000.0
        self.events: list[dict] = [
            {
                "ph": "M",
                "pid": _PID,
                "name": "process_name",
                "args": {"name": "Novella NPU"},
            }
        ]
        self.tid = {}
        for tid, (unit, label) in enumerate(TRACKS.items(), start=1):
            self.tid[unit] = tid
            self.events.append(
                {
                    "ph": "M",
                    "pid": _PID,
                    "tid": tid,
                    "name": "thread_name",
                    "args": {"name": label},
                }
            )

    def _us(self, cycles: int) -> float:
        return cycles / self.cycles_per_us

    def span(self, unit: str, name: str, start: int, end: int, args: dict) -> None:
        self.events.append(
            {
                "ph": "X",
                "pid": _PID,
                "tid": self.tid[unit],
                "name": name,
                "ts": self._us(start),
                "dur": self._us(end) - self._us(start),
                "args": args,
            }
        )

    def wait(self, unit: str, channel: str, start: int, end: int) -> None:
        self.span(unit, f"wait {channel}", start, end, {"channel": channel})

    def to_dict(self) -> dict:
        return {"traceEvents": list(self.events), "displayTimeUnit": "ns"}

    def to_json(self, path: str | Path | None = None) -> str:
        """JSON text of the trace; also written to `path` if given."""
        text = json.dumps(self.to_dict())
        if path is not None:
            Path(path).write_text(text)
        return text
