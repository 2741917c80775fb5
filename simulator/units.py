"""Hardware state, grouped by unit: memories and token channels."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .isa import QUEUES


class MemoryUnit:
    """A flat fp32 memory addressed in elements."""

    def __init__(self, name: str, label: str, elems: int):
        self.name = name
        self.label = label
        self.size = int(elems)
        self.data = np.zeros(self.size, dtype=np.float32)

    def _span(self, addr: int, n: int) -> slice:
        if addr < 0 or addr + n > self.size:
            raise IndexError(f"{self.label} range [{addr}, {addr + n}) exceeds size {self.size}")
        return slice(addr, addr + n)

    def write(self, addr: int, array) -> None:
        """Host write of a flattened array at element `addr`."""
        flat = np.asarray(array, dtype=np.float32).reshape(-1)
        self.data[self._span(addr, flat.size)] = flat

    def read(self, addr: int, n: int) -> np.ndarray:
        """Host read of `n` elements at `addr` (a copy)."""
        return self.data[self._span(addr, n)].copy()


class Dram(MemoryUnit):
    def __init__(self, elems: int):
        super().__init__("dram", "DRAM", elems)


class Scratchpad(MemoryUnit):
    def __init__(self, elems: int):
        super().__init__("spad", "scratchpad", elems)


class Accumulator(MemoryUnit):
    def __init__(self, elems: int):
        super().__init__("acc", "accumulator", elems)


@dataclass(frozen=True)
class Token:
    ready: int
    clock: tuple[int, int, int] | None


class TokenChannel:
    """A FIFO of dependency tokens between two queues."""

    def __init__(self, name: str):
        self.name = name
        self.fifo: deque[Token] = deque()

    def __len__(self) -> int:
        return len(self.fifo)

    def peek(self) -> Token:
        return self.fifo[0]

    def pop(self) -> Token:
        return self.fifo.popleft()

    def push(self, token: Token) -> None:
        self.fifo.append(token)


def token_routes(chain) -> dict[tuple[str, str], str]:
    """(queue, header flag) -> channel of a queue chain: two channels between each pair of neighbours
    (`L2C`: load to compute, `C2L` back), pushed by one and popped by the other."""
    out = {}
    for a, b in zip(chain, chain[1:]):
        down, up = f"{a[0].upper()}2{b[0].upper()}", f"{b[0].upper()}2{a[0].upper()}"
        out |= {(a, "push_next"): down, (b, "pop_prev"): down, (b, "push_prev"): up, (a, "pop_next"): up}
    return out


TOKEN_ROUTES = token_routes(QUEUES)
CHANNELS = tuple(dict.fromkeys(TOKEN_ROUTES.values()))  # L2C, C2L, C2S, S2C
