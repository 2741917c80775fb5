"""The compiled artifact: MacroMeta + TileMeta (+ the weights and the DRAM plan).

* **MacroMeta**: reusable instruction templates, one entry per distinct
  kernel instance. Each template holds its constant ISA fields, its
  variable fields as postfix affine programs over (grid dims, symbols), a
  `when` guard, and which tensor slot its DRAM address is relative to.
  Layers with equal shapes share one entry.
* **TileMeta**: one entry per macro in program order: which MacroMeta, the
  grid extents as expressions of the symbols, and each tensor slot's DRAM
  base. Nothing in either part grows with the length.
* **Programs**: an artifact holds one or more programs, each with its own
  MacroMeta, TileMeta and DRAM plan, for a box of symbol values (`ranges`,
  disjoint, together covering the symbols' bounds) and a `reason`: the
  generic program, a sub-range torch.export traced separately (a guard of
  the model), or a shape bucket the cost model chose (`--novella-buckets`).
  The runtime picks the program by the symbol values; weights are shared.

The file format is `NVLA` + version + a JSON header (sizes, sha256 and,
when saved with a key, an HMAC-SHA256 signature) + the metadata JSON + the
raw fp32 weights. `load` validates the structure before anything runs
(`artifact_check`); `load(path, key=...)` also authenticates the file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import io
import json
import math
import re
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from simulator import isa

from ..errors import ArtifactError, InputError
from . import check as artifact_check

FORMAT_VERSION = 3  # 2: a list of programs, each for a box of symbol values; 3: the runtime facts (`decide.py`)
MAGIC = b"NVLA"


@dataclass
class InstTemplate:
    opcode: str
    const: dict
    var: dict  # field -> [postfix, ...] (min of the results)
    when: list  # [["eq"|"ge", postfix], ...]
    tensor: int | None = None  # slot whose base is added to dram_base; -1 = result
    slot: dict = field(default_factory=dict)  # address field -> ping-pong slot stride (--novella-schedule)
    affine: list = field(default_factory=list)  # var fields affine in the symbols (`decide.py`)


@dataclass
class MacroMeta:
    kernel: str
    n_dims: int
    insts: list
    schedule: dict = field(default_factory=dict)  # load_slots / store_slots (--novella-schedule)


@dataclass
class TileMeta:
    macro: int
    name: str
    grid: list  # [postfix, ...]
    bases: dict  # slot (str) -> postfix
    last: list = field(default_factory=list)  # [template, guard]: "the last point of a grid dim" (`decide.py`)
    affine: list = field(default_factory=list)  # slots whose base is affine in the symbols (`decide.py`)


@dataclass
class TensorMeta:
    shape: list  # [postfix, ...]
    dram: list  # postfix
    dtype: str = "float32"  # the torch dtype of a model input (held as fp32 in DRAM: frontend/dtypes.py)
    limit: list = field(default_factory=list)  # [max |value|, why] an integer input must keep (empty: 2**24)


PROGRAM_FIELDS = ("inputs", "outputs", "dram_size", "weight_layout", "macros", "tiles", "kv")


@dataclass
class Program:
    """One program of an artifact: the box of symbol values it covers (`ranges`, one [lo, hi] per
    symbol), why it exists (`reason`: "generic", an export guard, a cost-model bucket) and its
    own DRAM plan, MacroMeta and TileMeta."""

    ranges: list  # [[lo, hi], ...], one per symbol
    reason: str
    inputs: list
    outputs: list
    dram_size: list  # postfix
    weight_layout: dict  # name -> [offset, shape]
    macros: list
    tiles: list
    # the paged KV cache (`--novella-kv-cache`): page_size, vbase, vspan, slots [{heads, head_dim,
    # page_elems}], and which inputs / outputs are paged (by index; the host neither writes nor reads them)
    kv: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        box = ", ".join(f"[{lo}, {hi}]" for lo, hi in self.ranges)
        kv = f", paged KV cache (page size {self.kv['page_size']})" if self.kv else ""
        return (
            f"Program({box}, {self.reason!r}, {len(self.macros)} templates, {len(self.tiles)} tile rules, "
            f"{len(self.inputs)} inputs, {len(self.outputs)} outputs{kv})"
        )


@dataclass
class Artifact:
    """The compiled model: its symbols' bounds, the programs that cover them (disjoint boxes, picked
    by the symbol values at run time), the weights they share and the config they were built for.

    With one program, its fields (`macros`, `tiles`, `inputs`, ...) read through the artifact."""

    version: int
    config: dict
    config_fingerprint: str
    symbols: list  # [[name, lo, hi], ...]
    programs: list
    weights: dict = field(default_factory=dict, repr=False)

    def __getattr__(self, name):
        if name in PROGRAM_FIELDS and "programs" in self.__dict__:
            progs = self.__dict__["programs"]
            if len(progs) == 1:
                return getattr(progs[0], name)
            raise AttributeError(
                f"this artifact holds {len(progs)} programs ({self.describe_ranges()}); '{name}' is per "
                "program: use artifact.programs[i], artifact.view(i) or artifact.pick(symbol values)"
            )
        raise AttributeError(f"'Artifact' object has no attribute '{name}'")

    def __repr__(self) -> str:
        syms = ", ".join(f"{n} in [{lo}, {hi}]" for n, lo, hi in self.symbols) or "no symbols"
        progs = f"{len(self.programs)} program" + ("s" if len(self.programs) != 1 else "")
        return (
            f"<Artifact {syms}: {progs}, MacroMeta {self.macro_nbytes:,} B, TileMeta {self.tile_nbytes:,} B, "
            f"weights {self.weight_nbytes:,} B>"
        )

    def describe_ranges(self) -> str:
        """The programs' boxes in words: `T in [1, 1] (export guard ...); T in [2, 2048] (generic)`."""
        names = [s[0] for s in self.symbols]
        parts = []
        for p in self.programs:
            box = ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(names, p.ranges)) or "no symbols"
            parts.append(f"{box} ({p.reason})")
        return "; ".join(parts)

    def pick(self, values) -> int:
        """The index of the program whose box holds the symbol values; an InputError naming the symbols
        and the programs' ranges when none does."""
        values = [int(v) for v in values]
        for i, p in enumerate(self.programs):
            if all(lo <= v <= hi for v, (lo, hi) in zip(values, p.ranges)):
                return i
        named = ", ".join(f"{s[0]}={v}" for s, v in zip(self.symbols, values))
        raise InputError(
            f"{named} is outside every compiled program: {self.describe_ranges()}; "
            "recompile with wider bounds (min_len/max_len, or the Dim's min/max in dynamic_shapes)"
        )

    def view(self, i: int) -> Artifact:
        """Program `i` alone, as a one-program artifact whose symbol bounds are the program's box."""
        p = self.programs[i]
        syms = [[s[0], lo, hi] for s, (lo, hi) in zip(self.symbols, p.ranges)]
        names = {n for n in p.weight_layout}
        weights = {k: v for k, v in self.weights.items() if k in names}
        return Artifact(self.version, self.config, self.config_fingerprint, syms, [p], weights)

    def metadata(self) -> dict:
        """JSON-able metadata. The programs' MacroMeta and TileMeta are pooled: `macros` and `tiles` hold
        each distinct template set and tile rule once; a program lists its macros (its own order) and
        tiles by pool index, and a pooled tile names its macro by pool index. A shape bucket thus costs
        only the templates and tile rules it changes. A template's empty `slot`, a macro's empty
        `schedule`, a tensor's empty `limit` and empty runtime facts (`decide.py`) are left out."""
        d = asdict(self)
        d.pop("weights")
        pool_m, pool_t, keys_m, keys_t = [], [], {}, {}
        for prog in d["programs"]:
            _compact_tensors(prog)
            local = [_pooled(_compact(mm), pool_m, keys_m) for mm in prog["macros"]]
            prog["macros"] = local
            tiles = [_compact_tile({**t, "macro": _ref(local, t["macro"])}) for t in prog["tiles"]]
            prog["tiles"] = [_pooled(t, pool_t, keys_t) for t in tiles]
        d["macros"], d["tiles"] = pool_m, pool_t
        return d

    def program_metadata(self, i: int) -> dict:
        """Program `i`'s metadata in full (its macros and tiles themselves, tiles naming macros by its order)."""
        d = asdict(self.programs[i])
        d["macros"] = [_compact(mm) for mm in d["macros"]]
        d["tiles"] = [_compact_tile(t) for t in d["tiles"]]
        return _compact_tensors(d)

    def program_nbytes(self, i: int) -> tuple[int, int]:
        """(MacroMeta, TileMeta) bytes program `i` adds to the file: the pooled template sets and tile rules
        no earlier program uses, and its index lists."""
        return _pool_costs(self.metadata())[i]

    @property
    def macro_nbytes(self) -> int:
        """Bytes of MacroMeta (the pooled instruction templates and each program's list of them)."""
        return sum(c[0] for c in _pool_costs(self.metadata()))

    @property
    def tile_nbytes(self) -> int:
        """Bytes of TileMeta (the pooled grids and bases and each program's list of them)."""
        return sum(c[1] for c in _pool_costs(self.metadata()))

    @property
    def nbytes(self) -> int:
        """MacroMeta + TileMeta bytes: what the JIT needs besides weights and I/O layout."""
        return self.macro_nbytes + self.tile_nbytes

    @property
    def weight_nbytes(self) -> int:
        return sum(a.nbytes for a in self.weights.values())

    def save(self, path, key: bytes | str | None = None) -> None:
        """Writes the artifact; with `key`, also signs it (HMAC-SHA256 over the version, metadata and weights)."""
        meta = json.dumps(self.metadata(), separators=(",", ":")).encode()
        blob = b"".join(np.ascontiguousarray(self.weights[n], np.float32).tobytes() for n in sorted(self.weights))
        fields = {"meta_bytes": len(meta), "blob_bytes": len(blob), "sha256": hashlib.sha256(meta + blob).hexdigest()}
        if key is not None:
            fields["hmac_sha256"] = _mac(key, meta, blob)
        header = json.dumps(fields).encode()
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<II", FORMAT_VERSION, len(header)) + header + meta + blob)


def _compact_tensors(prog: dict) -> dict:
    """Leaves out an input's or output's empty `limit`."""
    for t in prog["inputs"] + prog["outputs"]:
        if not t["limit"]:
            del t["limit"]
    return prog


def _compact(mm: dict) -> dict:
    if not mm["schedule"]:
        del mm["schedule"]
    for t in mm["insts"]:
        for k in ("slot", "affine"):
            if not t[k]:
                del t[k]
    return mm


def _compact_tile(t: dict) -> dict:
    return {k: v for k, v in t.items() if v or k not in ("last", "affine")}


def _ref(local: list, i):
    """The pool index of a program's macro `i`; -1 for a tile naming no macro of its program (the checker
    refuses it on load)."""
    return local[i] if isinstance(i, int) and 0 <= i < len(local) else -1


def _json(x) -> bytes:
    return json.dumps(x, separators=(",", ":")).encode()


def _pooled(item: dict, pool: list, keys: dict) -> int:
    """The index of `item` in `pool`, appended if new."""
    k = json.dumps(item, sort_keys=True)
    if k not in keys:
        keys[k] = len(pool)
        pool.append(item)
    return keys[k]


def _pool_costs(meta: dict) -> list[tuple[int, int]]:
    """Per program, (MacroMeta, TileMeta) bytes: its index lists and the pool entries no program counted
    before it uses; generic programs count first, so a bucket costs what it does not share with them."""
    seen: dict = {"macros": set(), "tiles": set()}
    out: list = [None] * len(meta["programs"])
    order = sorted(range(len(out)), key=lambda i: not meta["programs"][i]["reason"].startswith("generic"))
    for i in order:
        prog = meta["programs"][i]
        cost = []
        for k in ("macros", "tiles"):
            new = [j for j in dict.fromkeys(prog[k]) if j not in seen[k]]
            seen[k].update(new)
            cost.append(sum(len(_json(meta[k][j])) + 1 for j in new) + len(_json(prog[k])))
        out[i] = tuple(cost)
    return out


def combine(artifacts: list[Artifact]) -> Artifact:
    """One artifact holding the programs of `artifacts` (compiled from one model for disjoint boxes of
    the symbols of the first symbolic artifact; each program's `ranges`, one per symbol of that one, and
    `reason` already set). A program of an artifact over fewer of those symbols (one fixed at a value,
    traced static) has its symbol references renumbered. Weights are shared by name when their values
    agree; a program whose weight of that name differs (a constant table built at its own bounds, e.g.
    an `arange`) keeps it under a name of its own (`name@<program>`)."""
    symbolic = [a for a in artifacts if a.symbols]
    if not symbolic:
        raise ArtifactError("cannot combine programs without symbols")
    names = [s[0] for s in symbolic[0].symbols]
    weights: dict = {}
    programs = []
    for a in artifacts:
        own = [s[0] for s in a.symbols]
        if not set(own) <= set(names):
            raise ArtifactError(f"cannot combine programs over symbols {names} and {own}")
        renumber = {f"s{i}": f"s{names.index(n)}" for i, n in enumerate(own) if i != names.index(n)}
        for p in a.programs:
            if len(p.ranges) != len(names):
                raise ArtifactError(
                    f"program '{p.reason}' has ranges {p.ranges}, not one [lo, hi] per symbol of {names}"
                )
            if renumber:
                for f in ("inputs", "outputs", "dram_size", "macros", "tiles", "kv"):
                    setattr(p, f, _renumbered(getattr(p, f), renumber))
            for name in list(p.weight_layout):
                w = a.weights[name]
                same = name in weights and (weights[name] is w or np.array_equal(weights[name], w))
                if name in weights and not (weights[name].shape == w.shape and same):
                    new = f"{name}@{len(programs)}"
                    p.weight_layout = {(new if k == name else k): v for k, v in p.weight_layout.items()}
                    name = new
                weights.setdefault(name, w)
            programs.append(p)
    programs.sort(key=lambda p: [r[0] for r in p.ranges])
    bounds = [[n, min(p.ranges[j][0] for p in programs), max(p.ranges[j][1] for p in programs)]
              for j, n in enumerate(names)]  # fmt: skip
    base = symbolic[0]
    return Artifact(base.version, base.config, base.config_fingerprint, bounds, programs, weights)


def _renumbered(x, renumber: dict):
    """`x` (postfix programs in nested metadata) with each symbol token `s<i>` renamed by `renumber`."""
    if isinstance(x, str):
        return renumber.get(x, x)
    if isinstance(x, list):
        return [_renumbered(v, renumber) for v in x]
    if isinstance(x, tuple):
        return tuple(_renumbered(v, renumber) for v in x)
    if isinstance(x, dict):
        return {k: _renumbered(v, renumber) for k, v in x.items()}
    if hasattr(x, "__dataclass_fields__"):
        return dataclasses.replace(x, **{f: _renumbered(getattr(x, f), renumber) for f in x.__dataclass_fields__})
    return x


MAX_FILE_BYTES = 4 << 30
MAX_HEADER_BYTES = 4096
MAX_META_BYTES = 256 << 20
MAX_JSON_DEPTH = 16


def _mac(key: bytes | str, meta: bytes, blob: bytes) -> str:
    key = key.encode() if isinstance(key, str) else key
    if not isinstance(key, bytes) or not key:
        raise ArtifactError("the signing key must be non-empty bytes or str")
    return hmac.new(key, struct.pack("<I", FORMAT_VERSION) + meta + blob, hashlib.sha256).hexdigest()


def load(path, config=None, key: bytes | str | None = None, *, check_bounds: bool = True) -> Artifact:
    """Reads an artifact and validates it before anything runs.

    Refuses (with an ArtifactError naming the file and the field) files that
    are not regular files, too large, truncated, corrupted (sha256), from
    another format version or config, structurally invalid (see
    `artifact_check`), or, with `key`, unsigned or signed with another key.

    `check_bounds=False` (only with `key`) skips instantiating each program at its box's corners
    (every field fits its ISA width, every DMA stays in DRAM), for a file this compiler signed itself;
    the structural checks still run."""
    if not check_bounds and key is None:
        raise ArtifactError("load(check_bounds=False) needs the signing key: only a signed artifact skips the check")
    where = f"artifact '{path}'"
    p = Path(path)
    try:
        if not p.is_file():
            raise ArtifactError(f"{where} is not a file" + ("" if p.exists() else " (it does not exist)"))
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ArtifactError(f"{where} is {size} bytes, more than the {MAX_FILE_BYTES} accepted")
        with open(p, "rb") as f:
            meta_b, blob = _read(f, size, where, key)
    except OSError as e:
        raise ArtifactError(f"cannot read {where}: {e.strerror or e}") from None
    return _checked(meta_b, blob, where, config, check_bounds)


def loads(data: bytes, config=None, key: bytes | str | None = None, *, check_bounds: bool = True,
          where: str = "artifact") -> Artifact:  # fmt: skip
    """`load` of an artifact's bytes (already read, e.g. after checking a signature over them)."""
    if not check_bounds and key is None:
        raise ArtifactError("loads(check_bounds=False) needs the signing key: only a signed artifact skips the check")
    if len(data) > MAX_FILE_BYTES:
        raise ArtifactError(f"{where} is {len(data)} bytes, more than the {MAX_FILE_BYTES} accepted")
    meta_b, blob = _read(io.BytesIO(data), len(data), where, key)
    return _checked(meta_b, blob, where, config, check_bounds)


def _checked(meta_b: bytes, blob: bytes, where: str, config, check_bounds: bool) -> Artifact:
    art = _from_metadata(meta_b, blob, where)
    if config is not None and art.config_fingerprint != config.fingerprint():
        raise ArtifactError(f"{where} was compiled for another hardware config; recompile for this one")
    if check_bounds:
        _check_encodes(art, where)
    return art


def _read(f, size: int, where: str, key) -> tuple[bytes, bytes]:
    """(metadata, weights blob), checked against the header's sizes, checksum and signature."""
    head = f.read(12)
    if len(head) < 12 or head[:4] != MAGIC:
        raise ArtifactError(f"{where} is not a novella artifact (bad magic); recompile the model")
    version, hlen = struct.unpack("<II", head[4:12])
    if version != FORMAT_VERSION:
        raise ArtifactError(
            f"{where} has format version {version}, this novella-mlir reads {FORMAT_VERSION}; recompile the model"
        )
    truncated = ArtifactError(f"{where} is truncated ({size} bytes); recompile or copy it again")
    if hlen > MAX_HEADER_BYTES:
        raise ArtifactError(f"{where} has a corrupted header (length {hlen})")
    if size < 12 + hlen:
        raise truncated
    header = _header(f.read(hlen), where)
    meta_n, blob_n = header["meta_bytes"], header["blob_bytes"]
    if meta_n > MAX_META_BYTES:
        raise ArtifactError(f"{where}: metadata of {meta_n} bytes is more than the {MAX_META_BYTES} accepted")
    body_n = size - 12 - hlen
    if body_n < meta_n + blob_n:
        raise truncated
    if body_n != meta_n + blob_n:
        raise ArtifactError(f"{where} has {body_n - meta_n - blob_n} unexpected trailing bytes; copy it again")
    body = f.read(body_n)
    if len(body) != body_n:
        raise truncated
    if hashlib.sha256(body).hexdigest() != header["sha256"]:
        raise ArtifactError(f"{where} is corrupted (checksum mismatch); recompile or copy it again")
    meta, blob = body[:meta_n], body[meta_n:]
    if key is not None:
        verify_signature(where, header.get("hmac_sha256"), _mac(key, meta, blob))
    return meta, blob


def verify_signature(where: str, mac, expected: str) -> None:
    """Refuses a file whose `hmac_sha256` header field `mac` is missing or is not `expected` (the MAC under
    the caller's key): artifacts and causal-LM files alike."""
    if mac is None:
        raise ArtifactError(f"{where} is not signed, but a key was given; save it with save(path, key=...)")
    if not (isinstance(mac, str) and hmac.compare_digest(mac, expected)):
        raise ArtifactError(f"{where} failed authentication (HMAC-SHA256 mismatch): not signed with this key")


def _header(raw: bytes, where: str) -> dict:
    bad = ArtifactError(f"{where} has a corrupted header")
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        raise bad from None
    if not isinstance(header, dict) or not {"meta_bytes", "blob_bytes", "sha256"} <= set(header):
        raise bad
    if set(header) - {"meta_bytes", "blob_bytes", "sha256", "hmac_sha256"}:
        raise bad
    for k in ("meta_bytes", "blob_bytes"):
        v = header[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise bad
    if not isinstance(header["sha256"], str):
        raise bad
    return header


def _json_depth(raw: bytes) -> int:
    """Maximum nesting of [ and { outside strings, without building the object."""
    text = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', raw)
    a = np.frombuffer(text, np.uint8)
    step = np.isin(a, (ord("["), ord("{"))).astype(np.int64) - np.isin(a, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))


def _from_metadata(meta_b: bytes, blob: bytes, where: str) -> Artifact:
    depth = _json_depth(meta_b)
    if depth > MAX_JSON_DEPTH:
        raise ArtifactError(f"{where} has metadata nested {depth} deep (at most {MAX_JSON_DEPTH}); it is not ours")
    try:
        m = json.loads(meta_b)
    except (ValueError, RecursionError) as e:
        raise ArtifactError(f"{where} has malformed metadata JSON: {e}") from None
    try:
        m = artifact_check.validate(m, len(blob))
    except ArtifactError as e:
        raise ArtifactError(f"{where} has malformed metadata: {e}") from None
    if m["version"] != FORMAT_VERSION:
        raise ArtifactError(f"{where} has malformed metadata: version {m['version']}, expected {FORMAT_VERSION}")
    m["programs"] = [_program(p) for p in m["programs"]]
    art = Artifact(**m)
    layout = {k: v for p in art.programs for k, v in p.weight_layout.items()}
    art.weights = _weights(layout, blob, where)
    return art


def _program(p: dict) -> Program:
    p["macros"] = [
        MacroMeta(x["kernel"], x["n_dims"], [InstTemplate(**i) for i in x["insts"]], x.get("schedule", {}))
        for x in p["macros"]
    ]
    p["tiles"] = [TileMeta(**t) for t in p["tiles"]]
    p["inputs"] = [TensorMeta(**t) for t in p["inputs"]]
    p["outputs"] = [TensorMeta(**t) for t in p["outputs"]]
    return Program(**p)


def _weights(layout: dict, blob: bytes, where: str) -> dict:
    sizes = {name: math.prod(layout[name][1]) * 4 for name in sorted(layout)}
    if sum(sizes.values()) != len(blob):
        raise ArtifactError(
            f"{where} has malformed metadata: the weight layout needs {sum(sizes.values())} bytes, "
            f"the weights blob has {len(blob)}"
        )
    out, off = {}, 0
    for name, n in sizes.items():
        out[name] = np.frombuffer(blob, np.float32, n // 4, off).reshape(layout[name][1])
        off += n
    return out


def _check_encodes(art: Artifact, where: str) -> None:
    """Each program at the lower and upper corner of its box instantiates: every field fits its ISA width."""
    for i in range(len(art.programs)):
        _check_program_encodes(art.view(i), where + (f" program {i}" if len(art.programs) > 1 else ""))


def _check_program_encodes(art: Artifact, where: str) -> None:
    from ..runtime.jit import Jit

    jit = Jit(art)
    for pick, which in ((1, "lower"), (2, "upper")):
        values = [s[pick] for s in art.symbols]
        named = ", ".join(f"{s[0]}={v}" for s, v in zip(art.symbols, values))
        try:
            words = jit.instantiate(values).words
        except (isa.EncodingError, RuntimeError, ValueError, IndexError, KeyError) as e:
            raise ArtifactError(
                f"{where} has malformed metadata: the program at the {which} bound ({named}) fails: {e}"
            ) from None
        bad = _dma_outside(words, int(_eval_at(art.dram_size, values)), artifact_check.virtual_window(art.kv))
        if bad is not None:
            raise ArtifactError(
                f"{where} has malformed metadata: at the {which} bound ({named}) instruction {bad[0]} "
                f"({bad[1]}) reaches DRAM [{bad[2]}, {bad[3]}), outside [0, {bad[4]}) (dram_size)"
            )


def _field(words: np.ndarray, op: isa.Opcode, name: str) -> np.ndarray:
    return isa.field(op, name).get(words)


def _dma_outside(words: np.ndarray, size: int, virtual: tuple[int, int] = (0, 0)):
    """(index, opcode, lo, hi, size) of the first LOAD/STORE whose in-bound rows leave DRAM (and the
    paged cache's virtual window), else None."""
    opcode = isa.opcodes(words)
    idx = np.flatnonzero((opcode == isa.Opcode.LOAD) | (opcode == isa.Opcode.STORE))
    if not idx.size:
        return None
    w = words[idx]
    get = {n: _field(w, isa.Opcode.LOAD, n) for n in ("dram_base", "dram_stride", "rows", "row_start", "row_step")}
    get |= {n: _field(w, isa.Opcode.LOAD, n) for n in ("row_bound", "cols")}
    start, step, rows, bound = get["row_start"], get["row_step"], get["rows"], get["row_bound"]
    safe = np.maximum(step, 1)
    j_lo = np.where(step > 0, np.maximum(0, -(start // safe)), 0)
    j_hi = np.where(step > 0, np.minimum(rows - 1, (bound - 1 - start) // safe), rows - 1)
    live = (rows > 0) & (j_lo <= j_hi) & ((step > 0) | ((start >= 0) & (start < bound)))
    lo = get["dram_base"] + (start + step * j_lo) * get["dram_stride"]
    hi = get["dram_base"] + (start + step * j_hi) * get["dram_stride"] + get["cols"]
    in_pages = (lo >= virtual[0]) & (hi <= virtual[1])
    bad = np.flatnonzero(live & (get["cols"] > 0) & ((lo < 0) | (hi > size)) & ~in_pages)
    if not bad.size:
        return None
    k = bad[0]
    return int(idx[k]), isa.Opcode(int(opcode[idx[k]])).name, int(lo[k]), int(hi[k]), size


def _eval_at(program, values) -> int:
    from ..runtime import expr

    return expr.evaluate(program, list(values))
