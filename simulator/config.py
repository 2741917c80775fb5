"""Hardware configuration of the Novella NPU, loaded from TOML."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONFIG_PATH = Path(__file__).parent / "configs" / "default.toml"

_KEYS: dict[str, tuple[str, str, type]] = {
    "clock_ghz": ("clock", "ghz", float),
    "issue_cycles": ("clock", "issue_cycles", int),
    "unit_queue_depth": ("compute", "unit_queue_depth", int),
    "matrix_rows": ("matrix", "rows", int),
    "matrix_cols": ("matrix", "cols", int),
    "matmul_latency": ("matrix", "latency", int),
    "spad_bytes": ("scratchpad", "bytes", int),
    "acc_bytes": ("accumulator", "bytes", int),
    "vector_lanes": ("vector", "lanes", int),
    "vector_latency": ("vector", "latency", int),
    "vector_functions": ("vector", "functions", tuple),
    "vector_fn_cycles": ("vector", "fn_cycles", dict),
    "dram_bytes_per_cycle": ("dram", "bytes_per_cycle", int),
    "dma_latency": ("dram", "dma_latency", int),
    "dram_burst_bytes": ("dram", "burst_bytes", int),
    "load_dma_engines": ("queues", "load_dma_engines", int),
    "store_dma_engines": ("queues", "store_dma_engines", int),
}
# Keys a config written before them (an artifact's copy) may lack; `to_dict` leaves them out at these
# values, so adding one keeps the fingerprint of every config that does not use it.
OPTIONAL = {"load_dma_engines": 1, "store_dma_engines": 1}


class ConfigError(ValueError):
    """A config file with a missing, unknown or invalid key."""


_MAY_BE_ZERO = {"matmul_latency", "vector_latency", "dma_latency"}


@dataclass(frozen=True)
class NovellaConfig:
    """Immutable hardware parameters. Memory sizes are in bytes."""

    clock_ghz: float
    issue_cycles: int
    unit_queue_depth: int
    matrix_rows: int
    matrix_cols: int
    matmul_latency: int
    spad_bytes: int
    acc_bytes: int
    vector_lanes: int
    vector_latency: int
    vector_functions: tuple[str, ...]
    vector_fn_cycles: dict[str, int]
    dram_bytes_per_cycle: int
    dma_latency: int
    dram_burst_bytes: int
    load_dma_engines: int = 1  # DMAs the load queue has in flight at once (they retire in order)
    store_dma_engines: int = 1

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    @property
    def spad_elems(self) -> int:
        return self.spad_bytes // 4

    @property
    def acc_elems(self) -> int:
        return self.acc_bytes // 4

    @property
    def macs_per_cycle(self) -> int:
        return self.matrix_rows * self.matrix_cols

    @property
    def dma_engines(self) -> dict[str, int]:
        """DMA queue -> transfers it has in flight at once (`timing.DmaQueue`)."""
        return {"load": self.load_dma_engines, "store": self.store_dma_engines}

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for name, default in OPTIONAL.items():
            if d[name] == default:
                del d[name]
        d["vector_functions"] = list(self.vector_functions)
        d["vector_fn_cycles"] = dict(sorted(self.vector_fn_cycles.items()))
        return d

    def fingerprint(self) -> str:
        """Stable sha256 hex digest of the canonical field values."""
        canon = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canon.encode()).hexdigest()


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e


def _flatten(raw: dict, path: Path) -> dict:
    known = {(sec, key): name for name, (sec, key, _) in _KEYS.items()}
    out = {}
    for sec, table in raw.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: top-level key '{sec}' must be a table")
        for key, value in table.items():
            if (sec, key) not in known:
                raise ConfigError(f"{path}: unknown config key '{sec}.{key}'")
            out[known[(sec, key)]] = value
    return out


def _check(name: str, value, path: Path):
    sec, key, kind = _KEYS[name]
    where = f"{path}: config key '{sec}.{key}'"
    if kind is dict:
        return _check_fn_cycles(value, where)
    if kind is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings, got {value!r}")
        return _vector_functions(value, where)
    ok_type = (int, float) if kind is float else (int,)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        raise ConfigError(f"{where} must be {kind.__name__}, got {value!r}")
    if value < 0 or (value == 0 and name not in _MAY_BE_ZERO):
        raise ConfigError(f"{where} must be positive, got {value!r}")
    if name in ("spad_bytes", "acc_bytes") and value % 4:
        raise ConfigError(f"{where} must be a multiple of 4 bytes, got {value}")
    return kind(value)


def _vector_functions(value: list, where: str) -> tuple[str, ...]:
    from .isa import VecFn

    names = [v.lower() for v in value]
    known = [f.name.lower() for f in VecFn]
    unknown = [v for v in names if v not in known]
    if not names or unknown or len(set(names)) != len(names):
        what = f"names unknown functions {unknown}" if unknown else "is empty" if not names else "repeats a name"
        raise ConfigError(f"{where} {what}; give a non-empty subset of {known}")
    return tuple(names)


def config_from_dict(d, where: str) -> NovellaConfig:
    """A config from `to_dict()` output (e.g. an artifact's copy), every key checked like a TOML file's."""
    if not isinstance(d, dict) or not set(_KEYS) - set(OPTIONAL) <= set(d) <= set(_KEYS):
        keys = sorted(d) if isinstance(d, dict) else type(d).__name__
        raise ConfigError(f"{where}: expected the keys {sorted(_KEYS)} (optional: {sorted(OPTIONAL)}), got {keys}")
    return NovellaConfig(**{n: _check(n, d.get(n, OPTIONAL.get(n)), where) for n in _KEYS})


def _check_fn_cycles(value, where: str) -> dict[str, int]:
    from .isa import VecFn

    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table of VEC function -> cycles per beat, got {value!r}")
    out = {}
    for fn, cycles in value.items():
        if fn.upper() not in VecFn.__members__:
            raise ConfigError(f"{where}: unknown VEC function '{fn}' (known: {', '.join(VecFn.__members__)})")
        if isinstance(cycles, bool) or not isinstance(cycles, int) or cycles < 1:
            raise ConfigError(f"{where}.{fn} must be an int >= 1 (cycles per beat), got {cycles!r}")
        out[fn.lower()] = cycles
    return out


def load_config(path: str | Path | None = None) -> NovellaConfig:
    """Load a config TOML; keys missing from `path` take the default values."""
    values = _flatten(_read_toml(DEFAULT_CONFIG_PATH), DEFAULT_CONFIG_PATH)
    src = DEFAULT_CONFIG_PATH
    if path is not None:
        src = Path(path)
        values.update(_flatten(_read_toml(src), src))
    missing = set(_KEYS) - set(values)
    if missing:
        raise ConfigError(f"{src}: missing config keys {sorted(missing)}")
    return NovellaConfig(**{n: _check(n, values[n], src) for n in _KEYS})
