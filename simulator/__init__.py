"""Novella NPU: ISA definition and cycle-approximate simulator."""

from .config import ConfigError, NovellaConfig, load_config
from .errors import DeadlockError, HazardError, SimulatorError
from .functional import erf_f32
from .isa import (
    LAYOUT,
    QUEUE_OF,
    WORD_BITS,
    WORD_BYTES,
    EncodingError,
    Field,
    Instruction,
    Mem,
    Opcode,
    VecFn,
    VecMode,
    decode,
    decode_program,
    disassemble,
    encode,
    encode_batch,
)
from .machine import Simulator
from .stats import RunStats
from .trace import Trace

__all__ = [
    "LAYOUT",
    "QUEUE_OF",
    "WORD_BITS",
    "WORD_BYTES",
    "ConfigError",
    "DeadlockError",
    "EncodingError",
    "Field",
    "HazardError",
    "Instruction",
    "Mem",
    "NovellaConfig",
    "Opcode",
    "RunStats",
    "Simulator",
    "SimulatorError",
    "Trace",
    "VecFn",
    "VecMode",
    "decode",
    "decode_program",
    "disassemble",
    "encode",
    "encode_batch",
    "erf_f32",
    "load_config",
]
