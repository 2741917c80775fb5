"""The compiled artifact: MacroMeta + TileMeta (+ the weights and the DRAM plan).

* **MacroMeta**: reusable instruction templates, one entry per distinct
  kernel instance. Each template holds its constant ISA fields, its
  variable fields as postfix affine programs over (grid dims, symbols), a
  `when` guard, and which tensor slot its DRAM address is relative to.
  Layers with equal shapes share one entry.
* **TileMeta**: one entry per macro in program order: which MacroMeta, the
  grid extents as expressions of the symbols, and each tensor slot's DRAM
  base. Nothing in either part grows with the length.

The file format is `NVLA` + version + a JSON header (sizes and checksums)
+ the metadata JSON + the raw fp32 weights.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from torch_mlir import ir

from simulator import isa

from . import symbolic as sy
from .errors import ArtifactError
from .runtime import expr
from .transforms.common import attr_dict, body_ops, from_attr, functions

FORMAT_VERSION = 1
MAGIC = b"NVLA"
_ENUMS = {"fn": isa.VecFn, "mode": isa.VecMode}


@dataclass
class InstTemplate:
    opcode: str
    const: dict
    var: dict  # field -> [postfix, ...] (min of the results)
    when: list  # [["eq"|"ge", postfix], ...]
    tensor: int | None = None  # slot whose base is added to dram_base; -1 = result


@dataclass
class MacroMeta:
    kernel: str
    n_dims: int
    insts: list


@dataclass
class TileMeta:
    macro: int
    name: str
    grid: list  # [postfix, ...]
    bases: dict  # slot (str) -> postfix


@dataclass
class TensorMeta:
    shape: list  # [postfix, ...]
    dram: list  # postfix


@dataclass
class Artifact:
    version: int
    config: dict
    config_fingerprint: str
    symbols: list  # [[name, lo, hi], ...]
    inputs: list
    outputs: list
    dram_size: list
    weight_layout: dict  # name -> [offset, shape]
    macros: list
    tiles: list
    weights: dict = field(default_factory=dict, repr=False)
    # the paged KV cache (`--novella-kv-cache`): page_size, vbase, vspan, slots [{heads, head_dim,
    # page_elems}], and which inputs / outputs are paged (by index; the host neither writes nor reads them)
    kv: dict = field(default_factory=dict)

    def metadata(self) -> dict:
        d = asdict(self)
        d.pop("weights")
        return d

    def _section_bytes(self, key: str) -> int:
        return len(json.dumps(self.metadata()[key], separators=(",", ":")).encode())

    @property
    def macro_nbytes(self) -> int:
        """Bytes of MacroMeta (the instruction templates)."""
        return self._section_bytes("macros")

    @property
    def tile_nbytes(self) -> int:
        """Bytes of TileMeta (grids, bases)."""
        return self._section_bytes("tiles")

    @property
    def nbytes(self) -> int:
        """MacroMeta + TileMeta bytes: what the JIT needs besides weights and I/O layout."""
        return self.macro_nbytes + self.tile_nbytes

    @property
    def weight_nbytes(self) -> int:
        return sum(a.nbytes for a in self.weights.values())

    def save(self, path) -> None:
        meta = json.dumps(self.metadata(), separators=(",", ":")).encode()
        blob = b"".join(np.ascontiguousarray(self.weights[n], np.float32).tobytes() for n in sorted(self.weights))
        header = json.dumps(
            {"meta_bytes": len(meta), "blob_bytes": len(blob), "sha256": hashlib.sha256(meta + blob).hexdigest()}
        ).encode()
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<II", FORMAT_VERSION, len(header)) + header + meta + blob)


def load(path, config=None) -> Artifact:
    """Reads an artifact; refuses corrupted, truncated, foreign-version or foreign-config files."""
    data = Path(path).read_bytes()
    where = f"artifact '{path}'"
    if len(data) < 12 or data[:4] != MAGIC:
        raise ArtifactError(f"{where} is not a novella artifact (bad magic); recompile the model")
    version, hlen = struct.unpack("<II", data[4:12])
    if version != FORMAT_VERSION:
        raise ArtifactError(
            f"{where} has format version {version}, this novella-mlir reads {FORMAT_VERSION}; recompile the model"
        )
    meta_b, blob = _split(data, hlen, where)
    art = _from_metadata(meta_b, blob, where)
    if config is not None and art.config_fingerprint != config.fingerprint():
        raise ArtifactError(f"{where} was compiled for another hardware config; recompile for this one")
    return art


def _split(data: bytes, hlen: int, where: str) -> tuple[bytes, bytes]:
    """(metadata, weights blob), checked against the header's sizes and checksum."""
    truncated = ArtifactError(f"{where} is truncated ({len(data)} bytes); recompile or copy it again")
    if len(data) < 12 + hlen:
        raise truncated
    try:
        header = json.loads(data[12 : 12 + hlen])
        meta_n, blob_n, digest = header["meta_bytes"], header["blob_bytes"], header["sha256"]
        if not (isinstance(meta_n, int) and isinstance(blob_n, int) and isinstance(digest, str)):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ArtifactError(f"{where} has a corrupted header") from None
    body = data[12 + hlen :]
    if min(meta_n, blob_n) < 0 or len(body) < meta_n + blob_n:
        raise truncated
    if len(body) != meta_n + blob_n:
        raise ArtifactError(f"{where} has {len(body) - meta_n - blob_n} unexpected trailing bytes; copy it again")
    if hashlib.sha256(body).hexdigest() != digest:
        raise ArtifactError(f"{where} is corrupted (checksum mismatch); recompile or copy it again")
    return body[:meta_n], body[meta_n:]


def _from_metadata(meta_b: bytes, blob: bytes, where: str) -> Artifact:
    try:
        m = json.loads(meta_b)
        m["macros"] = [
            MacroMeta(x["kernel"], x["n_dims"], [InstTemplate(**i) for i in x["insts"]]) for x in m["macros"]
        ]
        m["tiles"] = [TileMeta(**t) for t in m["tiles"]]
        m["inputs"] = [TensorMeta(**t) for t in m["inputs"]]
        m["outputs"] = [TensorMeta(**t) for t in m["outputs"]]
        art = Artifact(**m)
        _validate(art)
        art.weights = _weights(art.weight_layout, blob)
    except (TypeError, KeyError, ValueError, IndexError, AttributeError) as e:
        raise ArtifactError(f"{where} has malformed metadata: {e}") from None
    return art


def _weights(layout: dict, blob: bytes) -> dict:
    sizes = {name: int(np.prod(layout[name][1])) * 4 for name in sorted(layout)}
    if sum(sizes.values()) != len(blob):
        raise ValueError(f"the weight layout needs {sum(sizes.values())} bytes, the blob has {len(blob)}")
    out, off = {}, 0
    for name, n in sizes.items():
        out[name] = np.frombuffer(blob[off : off + n], np.float32).reshape(layout[name][1])
        off += n
    return out


def _check(prog, n_syms: int, n_dims: int = 0) -> None:
    """A well-formed postfix program whose symbols and grid dims exist."""
    expr.validate(prog)
    for tok in prog:
        if isinstance(tok, str) and tok[0] in "sd" and int(tok[1:]) >= (n_syms if tok[0] == "s" else n_dims):
            raise ValueError(f"expression {prog} refers to {tok}, which does not exist")


def _validate(art: Artifact) -> None:
    if art.version != FORMAT_VERSION:
        raise ValueError(f"metadata version {art.version}")
    n = len(art.symbols)
    if any(not (isinstance(lo, int) and isinstance(hi, int) and lo <= hi) for _, lo, hi in art.symbols):
        raise ValueError(f"bad symbol bounds {art.symbols}")
    for p in [art.dram_size] + [p for t in art.inputs + art.outputs for p in t.shape + [t.dram]]:
        _check(p, n)
    for mm in art.macros:
        for inst in mm.insts:
            isa.Opcode[inst.opcode]
            if any(kind not in ("eq", "ge") for kind, _ in inst.when):
                raise ValueError(f"bad guard {inst.when} in {mm.kernel}")
            for p in [p for progs in inst.var.values() for p in progs] + [p for _, p in inst.when]:
                _check(p, n, mm.n_dims)
    for t in art.tiles:
        if not 0 <= t.macro < len(art.macros):
            raise ValueError(f"tile '{t.name}' names macro {t.macro}")
        mm = art.macros[t.macro]
        if len(t.grid) != mm.n_dims:
            raise ValueError(f"tile '{t.name}' has {len(t.grid)} grid dims, its macro {mm.n_dims}")
        for p in t.grid + list(t.bases.values()):
            _check(p, n)
        slots = {str(i.tensor) for i in mm.insts if i.tensor is not None}
        if not slots <= set(t.bases):
            raise ValueError(f"tile '{t.name}' has no DRAM base for tensor slots {sorted(slots - set(t.bases))}")


# ------------------------------------------------------------------ extraction


def extract(module: ir.Module, weights: dict, config) -> Artifact:
    """Builds the artifact from a module after `--novella-inst-gen`."""
    mop = module.operation
    fn = functions(mop)[0]
    block = fn.regions[0].blocks[0]
    dram = _dram_of(fn)
    macros, index, tiles, layout = [], {}, [], {}
    for op in body_ops(fn):
        name = op.operation.name
        if name == "novella.weight":
            wname = ir.StringAttr(op.attributes["name"]).value
            layout[wname] = [sy.evaluate(_dram_expr(op), []), list(weights[wname].shape)]
        elif name == "novella.macro":
            mm, bases = _macro(op, dram)
            key = json.dumps(asdict(mm), sort_keys=True)
            idx = index.setdefault(key, len(macros))
            if idx == len(macros):
                macros.append(mm)
            tiles.append(TileMeta(idx, f"{mm.kernel.split('.')[1]}_{len(tiles)}", _grid(op), bases))
    ret = list(block.operations)[-1]
    return Artifact(
        version=FORMAT_VERSION,
        config=config.to_dict(),
        config_fingerprint=config.fingerprint(),
        symbols=[[s.name, s.lo, s.hi] for s in sy.read_symbols(mop)],
        inputs=[_tensor_meta(a, dram) for a in block.arguments],
        outputs=[_tensor_meta(v, dram) for v in ret.operands],
        dram_size=sy.to_postfix(sy.map_results(fn.attributes["novella.dram_size"])[0]),
        weight_layout=layout,
        macros=macros,
        tiles=tiles,
        weights={k: np.ascontiguousarray(v, np.float32) for k, v in weights.items()},
        kv=_kv_meta(fn),
    )


def _kv_meta(fn) -> dict:
    """The paged cache of a function after `--novella-kv-cache` (empty without one)."""
    from .kernels.kv_cache import PAGED_VBASE, PAGED_VSPAN

    if "novella.kv_cache" not in fn.attributes:
        return {}
    d = from_attr(fn.attributes["novella.kv_cache"])
    return {
        "page_size": d["page_size"],
        "vbase": PAGED_VBASE,
        "vspan": PAGED_VSPAN,
        "slots": d["slots"],
        "outputs": d["results"],
        "inputs": sorted([int(k), v] for k, v in d["args"].items()),
    }


def _dram_expr(op) -> ir.AffineExpr:
    return sy.map_results(op.attributes["novella.dram"])[0]


def _dram_of(fn):
    """value -> DRAM offset expression, for block arguments and op results."""
    block = fn.regions[0].blocks[0]
    arg_attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
    out = {}
    for a, d in zip(block.arguments, arg_attrs):
        out[a] = sy.map_results(ir.DictAttr(d)["novella.dram"])[0]
    for op in body_ops(fn):
        if "novella.dram" in op.attributes:
            out[op.results[0]] = _dram_expr(op)
    return out


def _tensor_meta(v, dram) -> TensorMeta:
    shape = sy.shape_of(ir.RankedTensorType(v.type))
    return TensorMeta([sy.to_postfix(e) for e in shape], sy.to_postfix(dram[v]))


def _grid(macro) -> list:
    return [sy.to_postfix(e) for e in sy.map_results(macro.attributes["grid"])]


def _macro(macro, dram) -> tuple[MacroMeta, dict]:
    n_dims = len(sy.map_results(macro.attributes["grid"]))
    bases = {"-1": sy.to_postfix(dram[macro.results[0]])}
    insts = []
    for inst in macro.regions[0].blocks[0].operations:
        t = _template(inst)
        if t.tensor is not None and t.tensor >= 0:
            bases[str(t.tensor)] = sy.to_postfix(dram[inst.operands[0]])
        insts.append(t)
    kernel = ir.StringAttr(macro.attributes["kernel"]).value
    return MacroMeta(kernel, n_dims, insts), bases


def _template(inst) -> InstTemplate:
    attrs = attr_dict(inst)
    opcode = ir.StringAttr(attrs.pop("opcode")).value
    tensor = from_attr(attrs.pop("tensor")) if "tensor" in attrs else None
    if opcode == "STORE":
        tensor = -1
    when = sy.integer_set_constraints(attrs.pop("when")) if "when" in attrs else []
    when = [[kind, sy.to_postfix(e)] for kind, e in when]
    const, var = {}, {}
    for k, a in attrs.items():
        if isinstance(a, ir.AffineMapAttr):
            var[k] = [sy.to_postfix(e) for e in a.value.results]
        else:
            v = from_attr(a)
            const[k] = int(_ENUMS[k][v]) if k in _ENUMS else v
    return InstTemplate(opcode, const, var, when, tensor)
