"""What `CausalLM.generate` and the engine record: one `Step` per program run, a `GenerateRun` per call."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Step:
    """One program run of one sequence: prefill or a decode step."""

    kind: str
    sequence: int
    position: int  # the past length (decode) or prompt length (prefill)
    cycles: int
    dma_bytes: int
    jit_seconds: float  # host: a new bucket's instantiation, else the patch of the injected fields
    sim_seconds: float
    pages_in_use: int
    kv_bytes_in_use: int
    instructions: int
    new_bucket: bool = False  # the step's structure (key/value tile count) was instantiated now
    words: np.ndarray = field(repr=False, default=None)  # a copy of the words run (generate(keep_words=True))


@dataclass
class GenerateRun:
    steps: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # per sequence: [n_generated, vocab] (the logits of each step)
    kv_bytes_max_len: int = 0  # what allocating max_len positions per sequence would take
    kv_bytes_peak: int = 0
    keep_words: bool = False
    tokens: int = 0  # generated, all sequences
    seconds: float = 0.0  # host wall time of the whole generate()

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0
