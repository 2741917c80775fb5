"""Human-readable views of a compiled artifact (`novella inspect`)."""

from __future__ import annotations

from simulator import isa

from ..runtime import expr

_INFIX = {"+": "+", "*": "*", "floordiv": "floordiv", "ceildiv": "ceildiv", "mod": "mod"}


def infix(program: list, names: list[str] | None = None) -> str:
    """A postfix program as text, symbols by name: ["s0", 64, "ceildiv"] -> "T ceildiv 64"."""
    names = names or []
    stack: list[tuple[str, bool]] = []  # (text, is_compound)
    for tok in program:
        if isinstance(tok, int):
            stack.append((str(tok), False))
        elif tok in _INFIX:
            (b, cb), (a, ca) = stack.pop(), stack.pop()
            stack.append((_binary(tok, a, ca, b, cb), True))
        elif tok == expr.LANE:  # a lane field: the symbol at that index
            stack.append((f"symbol[{stack.pop()[0]}]", False))
        elif tok[0] == "s" and int(tok[1:]) < len(names):
            stack.append((names[int(tok[1:])], False))
        else:
            stack.append((tok, False))
    return stack[0][0] if len(stack) == 1 else " ".join(s for s, _ in stack)


def _binary(op: str, a: str, ca: bool, b: str, cb: bool) -> str:
    if op == "+":
        if a.startswith("-") and not b.startswith("-"):
            a, b = b, a
        if b.startswith("-"):
            return f"{a} - {b[1:]}"
        if b.endswith(" * -1") or b.startswith("-1 * "):
            return f"{a} - {b.replace(' * -1', '').replace('-1 * ', '')}"
        return f"{a} + {b}"
    if op == "*":
        if b.startswith("-") and not ca:
            return f"-{b[1:]} * {a}" if b != "-1" else f"-{a}"
        return f"{_paren(a, ca)} * {_paren(b, cb)}"
    return f"{_paren(a, ca)} {op} {_paren(b, cb)}"


def _paren(text: str, compound: bool) -> str:
    return f"({text})" if compound else text


def _when(conds: list, names: list[str]) -> str:
    parts = []
    for kind, p in conds:
        text = infix(p, names)
        if kind == "eq" and text.startswith("-") and " " not in text:
            text = text[1:]
        parts.append(f"{text} {'== 0' if kind == 'eq' else '>= 0'}")
    return " and ".join(parts)


def _const(name: str, value) -> str:
    enum = {"fn": isa.VecFn, "mode": isa.VecMode}.get(name)
    return f"{name}={enum(value).name}" if enum else f"{name}={value}"


def _slot(k) -> str:
    return "result" if str(k) == "-1" else f"operand {k}"


def describe(art, path: str = "") -> str:
    """The sections of `novella inspect`: sizes, symbols, programs (ranges, reasons, bytes), config, and per
    program its I/O, templates and tile rules."""
    names = [s[0] for s in art.symbols]
    lines = [f"artifact {path}  (format v{art.version})".rstrip(), ""]
    lines += _sizes(art)
    lines += ["", "symbols"] + [f"  {n} in [{lo}, {hi}]" for n, lo, hi in art.symbols]
    lines += ["", *programs_table(art)]
    lines += ["", f"config (fingerprint {art.config_fingerprint[:12]})"]
    lines += [f"  {k} = {v}" for k, v in art.config.items()]
    for i, prog in enumerate(art.programs):
        lines += ["", f"==== program {i}: {_box(prog, names)}", *_program(prog, names)]
    return "\n".join(lines)


def _box(prog, names) -> str:
    return ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(names, prog.ranges)) or "(no symbols)"


def programs_table(art) -> list[str]:
    """One line per program: its box of symbol values, MacroMeta + TileMeta bytes, and why it exists."""
    names = [s[0] for s in art.symbols]
    lines = [f"programs: {len(art.programs)}, picked at run time by the symbol values"]
    for i, prog in enumerate(art.programs):
        macro, tile = art.program_nbytes(i)
        lines.append(f"  #{i} {_box(prog, names):<22} {macro + tile:>8} B (macro {macro}, tile {tile})  {prog.reason}")
    edges = [p.ranges[j][1] for p in art.programs[:-1] for j in range(len(names))
             if p.ranges[j][1] < art.symbols[j][2]]  # fmt: skip
    if len(art.programs) > 1 and edges:
        lines.append(f"  boundaries (last value of each lower program): {', '.join(map(str, sorted(set(edges))))}")
    return lines


def _program(prog, names) -> list[str]:
    lines = ["inputs / outputs (shape @ DRAM offset, in fp32 elements)"]
    for kind, metas in (("input", prog.inputs), ("output", prog.outputs)):
        for i, m in enumerate(metas):
            shape = ", ".join(infix(p, names) for p in m.shape)
            lines.append(f"  {kind} {i}: [{shape}] @ {infix(m.dram, names)}")
    lines.append(f"  DRAM size: {infix(prog.dram_size, names)}")
    lines += ["", f"MacroMeta: {len(prog.macros)} macros (instruction template sets; equal layers share one)"]
    for i, mm in enumerate(prog.macros):
        lines += _macro(i, mm, names)
    lines += ["", f"TileMeta: {len(prog.tiles)} tile rules (one per macro, program order)"]
    for t in prog.tiles:
        grid = ", ".join(infix(g, names) for g in t.grid)
        bases = ", ".join(f"{_slot(k)} @ {infix(v, names)}" for k, v in sorted(t.bases.items()))
        lines.append(f"  {t.name}: macro #{t.macro}, grid [{grid}]; {bases}")
    return lines


def _sizes(art) -> list[str]:
    return [
        "sizes",
        f"  MacroMeta (templates)   {art.macro_nbytes:>10} B",
        f"  TileMeta (tile rules)   {art.tile_nbytes:>10} B",
        f"  weights                 {art.weight_nbytes:>10} B  ({len(art.weights)} tensors)",
    ]


def _macro(i: int, mm, names: list[str]) -> list[str]:
    dims = ", ".join(f"d{j}" for j in range(mm.n_dims))
    lines = [f"  #{i} {mm.kernel}  grid ({dims}), {len(mm.insts)} templates"]
    for t in mm.insts:
        head = t.opcode if t.tensor is None else f"{t.opcode} {_slot(t.tensor)}"
        const = " ".join(_const(k, v) for k, v in sorted(t.const.items()))
        var = " ".join(
            f"{k}=min({', '.join(infix(p, names) for p in ps)})" if len(ps) > 1 else f"{k}={infix(ps[0], names)}"
            for k, ps in sorted(t.var.items())
        )
        when = f"  when {_when(t.when, names)}" if t.when else ""
        lines.append(f"     {head:<16} {const} {var}{when}".rstrip())
    return lines


def evaluate_shape(meta, syms) -> list[int]:
    """Concrete shape of a TensorMeta at symbol values `syms`."""
    return [int(expr.evaluate(p, syms)) for p in meta.shape]
