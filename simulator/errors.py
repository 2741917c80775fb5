"""Exceptions raised by the simulator."""

from __future__ import annotations


class SimulatorError(Exception):
    """An instruction could not execute; names its index and mnemonic."""

    def __init__(self, index: int | None, mnemonic: str, message: str):
        self.index = index
        self.mnemonic = mnemonic
        self.message = message
        where = f"instruction {index} ({mnemonic})" if index is not None else mnemonic
        super().__init__(f"{where}: {message}")


class HazardError(SimulatorError):
    """Two unordered instructions in different queues touch the same memory."""


class DeadlockError(SimulatorError):
    """No queue head can obtain its tokens; `blocked` lists (queue, index,
    mnemonic, channels)."""

    def __init__(self, blocked: list[tuple[str, int, str, list[str]]]):
        self.blocked = blocked
        parts = [f"{q} queue blocked at instruction {i} ({m}) waiting on {'+'.join(chs)}" for q, i, m, chs in blocked]
        super().__init__(blocked[0][1], blocked[0][2], "deadlock: " + "; ".join(parts))
