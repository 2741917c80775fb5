"""Structural validation of an artifact's metadata, run by `artifact.load` before anything executes.

Every check names the field at fault (`macros[1].insts[4].const.rows`):

* types and ranges: ISA fields against their bit widths and enums, tensor
  slots by opcode (a LOAD reads an operand slot, a STORE writes the result);
* postfix expressions: well formed, every divisor a positive constant,
  naming only existing symbols and grid dims (sizes may be polynomial in
  the symbols: attention scores are T x T);
* symbol bounds: names unique, 0 <= lo <= hi <= the ISA's row range;
* programs: each one's `ranges` a sub-box of the bounds, the boxes
  disjoint and together covering the bounds; a weight named by several
  programs has one shape; each program is checked below over its own box;
* at every corner of the bounds box: tile grids >= 1, weight, input and
  output DRAM regions inside `dram_size` and not overlapping, tile bases
  inside DRAM, `dram_size` addressable by the 32-bit `dram_base` field;
* the config against its fingerprint.
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np

from simulator import isa
from simulator.config import ConfigError, config_from_dict

from ..errors import ArtifactError
from ..frontend.dtypes import EXACT_INT
from ..machine.target import DRAM_LIMIT, MAX_LENGTH
from ..runtime import expr
from .limits import INPUT_DTYPES, MAX_CONST, MAX_GRID_DIMS, MAX_PROGRAM, MAX_PROGRAMS, MAX_SLOTS, MAX_STEPS, MAX_SYMBOLS

_TOP = ("version", "config", "config_fingerprint", "symbols", "programs")
_PROGRAM = ("ranges", "reason", "inputs", "outputs", "dram_size", "weight_layout", "macros", "tiles")
_OPERAND = re.compile(r"([sd])(\d{1,3})")
_HEADER = {f.name for f in isa.HEADER}
_LAYOUT = {op: {f.name: f for f in fields if f.name not in _HEADER} for op, fields in isa.LAYOUT.items()}
_ENUMS = {"fn": isa.VecFn, "mode": isa.VecMode}


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _int(v, field: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad(field, f"expected an integer, got {type(v).__name__} {_short(v)}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise _Bad(field, f"value {v} is outside [{lo}, {hi}]")
    return v


def _type(v, kind, field: str):
    if not isinstance(v, kind) or isinstance(v, bool):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _Bad(field, f"expected {name}, got {type(v).__name__} {_short(v)}")
    return v


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _keys(d, want, field: str, optional=()) -> dict:
    _type(d, dict, field)
    missing, extra = set(want) - set(d), set(d) - set(want) - set(optional)
    if missing or extra:
        raise _Bad(field, f"missing keys {sorted(missing)}, unexpected keys {sorted(extra)}")
    return d


def check_program(p, field: str, n_syms: int, n_dims: int = 0) -> None:
    """A well-formed postfix program over existing symbols and grid dims, dividing only by positive constants."""
    if not isinstance(p, list) or not 1 <= len(p) <= MAX_PROGRAM:
        raise _Bad(field, f"expected an expression (a non-empty token list), got {_short(p)}")
    stack: list = []  # the constant value, or None for a symbolic operand
    for tok in p:
        if isinstance(tok, int) and not isinstance(tok, bool):
            stack.append(_int(tok, field, -MAX_CONST, MAX_CONST))
        elif isinstance(tok, str) and (m := _OPERAND.fullmatch(tok)):
            limit = n_syms if m.group(1) == "s" else n_dims
            if int(m.group(2)) >= limit:
                what = "symbol" if m.group(1) == "s" else "grid dim"
                raise _Bad(field, f"expression {_short(p)} refers to {tok}, but there are {limit} {what}s")
            stack.append(None)
        elif tok == expr.LANE:  # a lane field: symbolic
            if not stack:
                raise _Bad(field, f"malformed expression {_short(p)}")
            stack[-1] = None
        elif tok in expr.OPERATORS:
            if len(stack) < 2:
                raise _Bad(field, f"malformed expression {_short(p)}")
            b, a = stack.pop(), stack.pop()
            stack.append(_apply(tok, a, b, p, field))
        else:
            raise _Bad(field, f"bad token {_short(tok)} in expression {_short(p)}")
    if len(stack) != 1:
        raise _Bad(field, f"malformed expression {_short(p)}")


def _apply(tok, a, b, p, field):
    if tok in ("floordiv", "ceildiv", "mod") and not (b is not None and b > 0):
        raise _Bad(field, f"expression {_short(p)} divides by {b if b is not None else 'a symbol'}; "
                   "divisors must be positive constants")  # fmt: skip
    if a is None or b is None:
        return None
    return _int(expr.apply(tok, a, b), field, -MAX_CONST, MAX_CONST)


def _eval(p, syms) -> int:
    return int(expr.evaluate(p, list(syms)))


def validate(m, blob_bytes: int) -> dict:
    """The metadata dict `m` (weights blob of `blob_bytes`) with each program's pooled macros and tiles
    in full; raises ArtifactError naming the first bad field."""
    try:
        m = _unpool(m)
        _validate(m, blob_bytes)
    except _Bad as e:
        raise ArtifactError(str(e)) from None
    return m


def _unpool(m) -> dict:
    """Each program's `macros` / `tiles` (indices into the pools `m["macros"]` / `m["tiles"]`) as the entries
    themselves, a tile's macro as the index in its program's list."""
    _keys(m, _TOP + ("macros", "tiles"), "metadata")
    pools = {k: _type(m[k], list, k) for k in ("macros", "tiles")}
    progs = []
    for i, p in enumerate(_type(m["programs"], list, "programs")):
        f = f"programs[{i}]"
        _type(p, dict, f)
        refs = {}
        for k in ("macros", "tiles"):
            refs[k] = _type(p.get(k), list, f"{f}.{k}")
            for j, v in enumerate(refs[k]):
                _int(v, f"{f}.{k}[{j}]", 0, len(pools[k]) - 1)
        if len(set(refs["macros"])) != len(refs["macros"]):
            raise _Bad(f + ".macros", "lists a pooled macro twice")
        local = {v: j for j, v in enumerate(refs["macros"])}
        tiles = []
        for j, v in enumerate(refs["tiles"]):
            t = _type(pools["tiles"][v], dict, f"tiles[{v}]")
            mac = t.get("macro")
            if not isinstance(mac, int) or isinstance(mac, bool) or mac not in local:
                raise _Bad(f"{f}.tiles[{j}].macro", f"tile rule {v} names macro {_short(t.get('macro'))}, "
                           f"which the program does not list")  # fmt: skip
            tiles.append({**t, "macro": local[t["macro"]]})
        progs.append({**p, "macros": [pools["macros"][v] for v in refs["macros"]], "tiles": tiles})
    return {k: v for k, v in m.items() if k not in ("macros", "tiles")} | {"programs": progs}


def _validate(m, blob_bytes: int) -> None:
    _keys(m, _TOP, "metadata")
    _int(m["version"], "version")
    _config(m["config"], m["config_fingerprint"])
    n = _symbols(m["symbols"])
    progs = _type(m["programs"], list, "programs")
    if not 1 <= len(progs) <= MAX_PROGRAMS:
        raise _Bad("programs", f"{len(progs)} programs; an artifact holds 1 to {MAX_PROGRAMS}")
    shapes: dict = {}
    for i, p in enumerate(progs):
        f = f"programs[{i}]"
        _keys(p, _PROGRAM, f, optional=("kv",))
        _type(p["reason"], str, f + ".reason")
        _ranges(p["ranges"], m["symbols"], f + ".ranges")
        _weight_layout(p["weight_layout"], f + ".weight_layout")
        for name, (_, shape) in p["weight_layout"].items():
            if shapes.setdefault(name, shape) != shape:
                raise _Bad(f"{f}.weight_layout['{name}']", f"shape {shape}, another program has {shapes[name]}")
    _cover(progs, m["symbols"])
    need = sum(math.prod(shape) for shape in shapes.values()) * 4
    if need != blob_bytes:
        where = "weight_layout" if len(progs) == 1 else "programs[*].weight_layout"
        raise _Bad(where, f"the weight layout needs {need} bytes, the weights blob has {blob_bytes}")
    for i, p in enumerate(progs):
        flat = {**p, "symbols": [[s[0], lo, hi] for s, (lo, hi) in zip(m["symbols"], p["ranges"])]}
        flat["config"] = m["config"]
        try:
            _program(flat, n)
        except _Bad as e:
            raise _Bad(f"programs[{i}].{e.field}", e.message) from None


def _program(p, n: int) -> None:
    """One program, with `symbols` narrowed to its box: expressions, then regions and grids at its corners."""
    _kv(p.get("kv", {}), len(_type(p["inputs"], list, "inputs")), len(_type(p["outputs"], list, "outputs")))
    _check_programs(p, n)
    for c in itertools.product(*[(lo, hi) for _, lo, hi in p["symbols"]]):
        _regions(p, c)
        _grids(p, c)


def _ranges(ranges, symbols, f: str) -> None:
    if not isinstance(ranges, list) or len(ranges) != len(symbols):
        raise _Bad(f, f"expected one [lo, hi] per symbol ({len(symbols)}), got {_short(ranges)}")
    for j, (r, (name, lo, hi)) in enumerate(zip(ranges, symbols)):
        if not isinstance(r, list) or len(r) != 2:
            raise _Bad(f"{f}[{j}]", f"expected [lo, hi], got {_short(r)}")
        a, b = _int(r[0], f"{f}[{j}][0]"), _int(r[1], f"{f}[{j}][1]")
        if not lo <= a <= b <= hi:
            raise _Bad(f"{f}[{j}]", f"{name} in [{a}, {b}] is not a sub-range of its bounds [{lo}, {hi}]")


def _cover(progs, symbols) -> None:
    """The programs' boxes are disjoint and together cover the bounds box (volumes add up)."""
    names = [s[0] for s in symbols]

    def box(p):
        return ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(names, p["ranges"])) or "the only point"

    for (i, a), (j, b) in itertools.combinations(enumerate(progs), 2):
        if all(x[0] <= y[1] and y[0] <= x[1] for x, y in zip(a["ranges"], b["ranges"])):
            raise _Bad(f"programs[{j}].ranges", f"{box(b)} overlaps programs[{i}] ({box(a)})")
    volume = sum(math.prod(hi - lo + 1 for lo, hi in p["ranges"]) for p in progs)
    if volume != math.prod(hi - lo + 1 for _, lo, hi in symbols):
        have = "; ".join(box(p) for p in progs)
        bounds = ", ".join(f"{n} in [{lo}, {hi}]" for n, lo, hi in symbols)
        raise _Bad("programs", f"the programs' ranges ({have}) do not cover the bounds {bounds}")


def _config(cfg, fingerprint) -> None:
    _type(fingerprint, str, "config_fingerprint")
    try:
        conf = config_from_dict(cfg, "config")
    except ConfigError as e:
        raise _Bad("config", str(e).removeprefix("config: ")) from None
    if conf.fingerprint() != fingerprint:
        raise _Bad("config_fingerprint", "does not match the config (the config was edited); recompile the model")


def _symbols(syms) -> int:
    _type(syms, list, "symbols")
    if len(syms) > MAX_SYMBOLS:
        raise _Bad("symbols", f"{len(syms)} symbols, at most {MAX_SYMBOLS} are supported")
    names = set()
    for i, s in enumerate(syms):
        f = f"symbols[{i}]"
        if not isinstance(s, list) or len(s) != 3:
            raise _Bad(f, f"expected [name, min, max], got {_short(s)}")
        name = _type(s[0], str, f + ".name")
        lo, hi = _int(s[1], f + ".min"), _int(s[2], f + ".max")
        if not 0 <= lo <= hi <= MAX_LENGTH:
            raise _Bad(f, f"bad symbol bounds [{lo}, {hi}]: need 0 <= min <= max <= {MAX_LENGTH} (24-bit row fields)")
        if name in names:
            raise _Bad(f + ".name", f"symbol name '{name}' is used twice")
        names.add(name)
    return len(syms)


def virtual_window(kv: dict) -> tuple[int, int]:
    """The paged KV cache's virtual DRAM window [lo, hi) (empty without one): the runtime maps it to pages."""
    return (kv["vbase"], kv["vbase"] + kv["vspan"] * len(kv["slots"])) if kv else (0, 0)


def _kv(kv, n_inputs: int, n_outputs: int) -> None:
    """The paged KV cache of a decoder program (--novella-kv-cache), if any."""
    _type(kv, dict, "kv")
    if not kv:
        return
    _keys(kv, ("page_size", "vbase", "vspan", "slots", "outputs", "inputs"), "kv", optional=("window",))
    _int(kv["page_size"], "kv.page_size", 1, MAX_LENGTH)
    if "window" in kv:
        _int(kv["window"], "kv.window", 1, MAX_LENGTH)
    _int(kv["vbase"], "kv.vbase", 0, DRAM_LIMIT - 1)
    _int(kv["vspan"], "kv.vspan", 1, DRAM_LIMIT)
    for j, slot in enumerate(_type(kv["slots"], list, "kv.slots")):
        _keys(slot, ("heads", "head_dim", "page_elems"), f"kv.slots[{j}]", optional=("batch", "seq_pages"))
        for name, v in slot.items():
            _int(v, f"kv.slots[{j}].{name}", 1, DRAM_LIMIT)
    outs = _type(kv["outputs"], list, "kv.outputs")
    if len(outs) != len(kv["slots"]):
        raise _Bad("kv.outputs", f"{len(outs)} paged outputs for {len(kv['slots'])} cache slots")
    for j, o in enumerate(outs):
        _int(o, f"kv.outputs[{j}]", 0, n_outputs - 1)
    for j, pair in enumerate(_type(kv["inputs"], list, "kv.inputs")):
        if not isinstance(pair, list) or len(pair) != 2:
            raise _Bad(f"kv.inputs[{j}]", f"expected [input index, cache slot], got {_short(pair)}")
        _int(pair[0], f"kv.inputs[{j}][0]", 0, n_inputs - 1)
        _int(pair[1], f"kv.inputs[{j}][1]", 0, len(kv["slots"]) - 1)


def _limit(lim, f: str) -> None:
    ok = isinstance(lim, list) and (not lim or len(lim) == 2 and isinstance(lim[1], str))
    if not ok:
        raise _Bad(f, f"expected [max |value|, why], got {_short(lim)}")
    if lim:
        _int(lim[0], f + "[0]", 1, EXACT_INT)


def _check_programs(m, n: int) -> None:
    check_program(m["dram_size"], "dram_size", n)
    for kind in ("inputs", "outputs"):
        _type(m[kind], list, kind)
        for i, t in enumerate(m[kind]):
            f = f"{kind}[{i}]"
            _keys(t, ("shape", "dram"), f, optional=("dtype", "limit"))
            _limit(t.get("limit", []), f + ".limit")
            if t.get("dtype", "float32") not in INPUT_DTYPES:
                raise _Bad(f + ".dtype", f"{_short(t['dtype'])} is not one of {', '.join(INPUT_DTYPES)}")
            _type(t["shape"], list, f + ".shape")
            for d, p in enumerate(t["shape"]):
                check_program(p, f"{f}.shape[{d}]", n)
            check_program(t["dram"], f + ".dram", n)
    _weight_layout(m["weight_layout"], "weight_layout")
    _type(m["macros"], list, "macros")
    for i, mm in enumerate(m["macros"]):
        _macro(mm, f"macros[{i}]", n, m["config"]["vector_functions"])
    _type(m["tiles"], list, "tiles")
    for i, t in enumerate(m["tiles"]):
        _tile(t, f"tiles[{i}]", n, m["macros"])


def _weight_layout(layout, where: str) -> None:
    _type(layout, dict, where)
    for name, entry in layout.items():
        f = f"{where}['{name}']"
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
            raise _Bad(f, f"expected [offset, shape], got {_short(entry)}")
        _int(entry[0], f + ".offset", 0, DRAM_LIMIT - 1)
        for d, v in enumerate(entry[1]):
            _int(v, f"{f}.shape[{d}]", 0, DRAM_LIMIT)


def _macro(mm, f: str, n: int, functions) -> None:
    _keys(mm, ("kernel", "n_dims", "insts"), f, optional=("schedule",))
    _type(mm["kernel"], str, f + ".kernel")
    schedule = _type(mm.get("schedule", {}), dict, f + ".schedule")
    _keys(schedule, (), f + ".schedule", optional=("load_slots", "store_slots", "early"))
    for name, v in schedule.items():
        if name != "early":
            _int(v, f"{f}.schedule.{name}", 1, MAX_SLOTS)
    tiers = _type(schedule.get("early", []), list, f + ".schedule.early")
    if tiers and len(tiers) != len(mm["insts"]):
        raise _Bad(f + ".schedule.early", f"needs one tier per instruction ({len(mm['insts'])}), got {len(tiers)}")
    for j, v in enumerate(tiers):
        _int(v, f"{f}.schedule.early[{j}]", 0, 2)
    dims = _int(mm["n_dims"], f + ".n_dims", 0, MAX_GRID_DIMS)
    _type(mm["insts"], list, f + ".insts")
    if not mm["insts"]:
        raise _Bad(f + ".insts", "a macro needs at least one instruction")
    for j, inst in enumerate(mm["insts"]):
        _inst(inst, f"{f}.insts[{j}]", n, dims, functions)


def _inst(t, f: str, n: int, dims: int, functions) -> None:
    _keys(t, ("opcode", "const", "var", "when", "tensor"), f, optional=("slot", "affine"))
    opcode = _type(t["opcode"], str, f + ".opcode")
    if opcode not in isa.Opcode.__members__:
        raise _Bad(f + ".opcode", f"unknown opcode '{_short(opcode)}' (expected one of {list(isa.Opcode.__members__)})")
    op = isa.Opcode[opcode]
    layout = _LAYOUT[op]
    _tensor_slot(op, t["tensor"], f + ".tensor")
    _type(t["const"], dict, f + ".const")
    _type(t["var"], dict, f + ".var")
    for name, v in t["const"].items():
        _const_field(op, layout, name, v, f"{f}.const.{name}", functions)
    for name, progs in t["var"].items():
        g = f"{f}.var.{name}"
        if name not in layout or name in t["const"]:
            raise _Bad(g, f"'{name}' is not a variable field of {opcode} (or is also constant)")
        if not isinstance(progs, list) or not 1 <= len(progs) <= 16:
            raise _Bad(g, f"expected a list of 1 to 16 expressions, got {_short(progs)}")
        for k, p in enumerate(progs):
            check_program(p, f"{g}[{k}]", n, dims)
    for name, stride in _type(t.get("slot", {}), dict, f + ".slot").items():
        if name not in layout:
            raise _Bad(f"{f}.slot.{name}", f"'{name}' is not a field of {opcode}")
        if isinstance(stride, list):  # [stride, slots]: three or more slots
            if len(stride) != 2:
                raise _Bad(f"{f}.slot.{name}", f"expected a stride or [stride, slots], got {_short(stride)}")
            _int(stride[1], f"{f}.slot.{name}[1]", 3, MAX_SLOTS)
            stride = stride[0]
        _int(stride, f"{f}.slot.{name}", 0, 1 << layout[name].bits)
    _type(t["when"], list, f + ".when")
    for k, c in enumerate(t["when"]):
        g = f"{f}.when[{k}]"
        if not isinstance(c, list) or len(c) != 2 or c[0] not in ("eq", "ge"):
            raise _Bad(g, f'expected ["eq" | "ge", expression], got {_short(c)}')
        check_program(c[1], g, n, dims)
    _names(t.get("affine", []), t["var"], f + ".affine", "variable field")


def _names(names, where, f: str, what: str) -> None:
    """A list of distinct keys of `where` (a runtime fact naming fields or slots)."""
    _type(names, list, f)
    for k, name in enumerate(names):
        if not isinstance(name, str) or name not in where or name in names[:k]:
            raise _Bad(f"{f}[{k}]", f"{_short(name)} is not a {what} (or is listed twice)")


def _last(last, insts, f: str) -> None:
    """[template, guard] pairs naming existing guards, each once."""
    _type(last, list, f)
    for k, pair in enumerate(last):
        ok = isinstance(pair, list) and len(pair) == 2 and pair not in last[:k]
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        if not (ok and 0 <= pair[0] < len(insts) and 0 <= pair[1] < len(insts[pair[0]]["when"])):
            raise _Bad(f"{f}[{k}]", f"expected [template, guard] of an existing guard, listed once, got {_short(pair)}")


def _tensor_slot(op, slot, f: str) -> None:
    if op in (isa.Opcode.LOAD, isa.Opcode.GATHER):
        _int(slot, f, 0, 64)
    elif op == isa.Opcode.STORE:
        if slot != -1 or isinstance(slot, bool):
            raise _Bad(f, f"a STORE writes the macro's result (slot -1), got {_short(slot)}")
    elif slot is not None:
        raise _Bad(f, f"a {op.name} reads no tensor, got slot {_short(slot)}")


def _const_field(op, layout, name, v, f: str, functions) -> None:
    if name not in layout:
        raise _Bad(f, f"{op.name} has no field '{name}' (fields: {', '.join(layout)})")
    if name in isa.FLOAT_FIELDS:
        _type(v, (int, float), f)
        if not math.isfinite(v) or abs(v) > float(np.finfo(np.float32).max):
            raise _Bad(f, f"{v} is not a finite float32")
        return
    field = layout[name]
    _int(v, f, field.lo, field.hi)
    if name in _ENUMS:
        enum = _ENUMS[name]
        if v not in enum._value2member_map_:
            raise _Bad(f, f"{v} is not a valid {enum.__name__} (expected one of {[int(e) for e in enum]})")
        if enum is isa.VecFn and enum(v).name.lower() not in functions:
            raise _Bad(f, f"vector fn {enum(v).name} is not in the config's vector.functions")


def _tile(t, f: str, n: int, macros) -> None:
    _keys(t, ("macro", "name", "grid", "bases"), f, optional=("last", "affine"))
    idx = _int(t["macro"], f + ".macro")
    name = _type(t["name"], str, f + ".name")
    if not 0 <= idx < len(macros):
        raise _Bad(f + ".macro", f"tile '{name}' names macro {idx}, but there are {len(macros)}")
    mm = macros[idx]
    if not isinstance(t["grid"], list) or len(t["grid"]) != mm["n_dims"]:
        raise _Bad(
            f + ".grid", f"tile '{name}' has {_short(t['grid'])} as grid, its macro has {mm['n_dims']} grid dims"
        )
    for d, p in enumerate(t["grid"]):
        check_program(p, f"{f}.grid[{d}]", n)
    _type(t["bases"], dict, f + ".bases")
    for slot, p in t["bases"].items():
        if not re.fullmatch(r"-1|\d{1,2}", slot):
            raise _Bad(f"{f}.bases", f"bad tensor slot '{_short(slot)}'")
        check_program(p, f"{f}.bases['{slot}']", n)
    slots = {str(i["tensor"]) for i in mm["insts"] if i["tensor"] is not None}
    if not slots <= set(t["bases"]):
        raise _Bad(f + ".bases", f"no DRAM base for tensor slots {sorted(slots - set(t['bases']))}")
    _last(t.get("last", []), mm["insts"], f + ".last")
    _names(t.get("affine", []), t["bases"], f + ".affine", "tensor slot")


def _at(m, c) -> str:
    return ", ".join(f"{s[0]}={v}" for s, v in zip(m["symbols"], c))


def _regions(m, c) -> None:
    size = _eval(m["dram_size"], c)
    if not 1 <= size <= DRAM_LIMIT:
        raise _Bad("dram_size", f"{size} elements at {_at(m, c)}; must be in [1, {DRAM_LIMIT}] (32-bit dram_base)")
    regions = []
    for name, (off, shape) in m["weight_layout"].items():
        regions.append((f"weight_layout['{name}']", off, math.prod(shape), "weight"))
    kv = m.get("kv") or {}
    paged = {("outputs", o) for o in kv.get("outputs", [])} | {("inputs", i) for i, _ in kv.get("inputs", [])}
    for kind in ("inputs", "outputs"):
        for i, t in enumerate(m[kind]):
            if (kind, i) in paged:  # in the KV cache's pages (kv.vbase), placed per step by the runtime
                continue
            shape = [_eval(p, c) for p in t["shape"]]
            if any(d < 0 for d in shape):
                raise _Bad(f"{kind}[{i}].shape", f"{shape} at {_at(m, c)} has a negative dim")
            regions.append((f"{kind}[{i}]", _eval(t["dram"], c), math.prod(shape), kind))
    for name, off, n, _ in regions:
        if off < 0 or off + n > size:
            raise _Bad(name, f"DRAM region [{off}, {off + n}) at {_at(m, c)} is outside [0, {size}) (dram_size)")
    _disjoint(m, c, regions)
    virtual = range(*virtual_window(kv))
    for i, t in enumerate(m["tiles"]):
        for slot, p in t["bases"].items():
            if not 0 <= _eval(p, c) < size and _eval(p, c) not in virtual:
                raise _Bad(f"tiles[{i}].bases['{slot}']", f"{_eval(p, c)} at {_at(m, c)} is outside [0, {size})")


def _disjoint(m, c, regions) -> None:
    live = sorted((off, off + n, name, kind) for name, off, n, kind in regions if n > 0)
    for (a0, a1, an, ak), (b0, b1, bn, bk) in itertools.pairwise(live):
        if b0 < a1 and not (ak == bk == "outputs" and (a0, a1) == (b0, b1)):
            raise _Bad(bn, f"DRAM region [{b0}, {b1}) overlaps {an} [{a0}, {a1}) at {_at(m, c)}")


def _grids(m, c) -> None:
    steps = 0
    for i, t in enumerate(m["tiles"]):
        ext = [_eval(p, c) for p in t["grid"]]
        for d, e in enumerate(ext):
            if e < 1:
                raise _Bad(f"tiles[{i}].grid[{d}]", f"extent {e} at {_at(m, c)}; every grid extent must be >= 1")
        steps += math.prod(ext)
    if steps > MAX_STEPS:
        raise _Bad("tiles", f"{steps} grid steps at {_at(m, c)}, more than the {MAX_STEPS} supported")
