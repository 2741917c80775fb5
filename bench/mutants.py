"""Mutation score: a fixed list of hand-written mutants, each run against a fast subset of the CI suite.

Each mutant is one textual edit of one production file (simulator, timing
model, JIT, tiling, allocation, lowering, artifact). For each, the repo is
copied to a temporary directory (tracked files, as in the work tree), the
edit applied, and the subset run there (lit, then pytest with `-x`); the
mutant is *killed* if anything fails, and the first failing test is
reported. Mutants 1-4 are the planted bugs of issue 13. It is a bench: it
is not run in CI.

    .venv/bin/python bench/mutants.py                 # all mutants, table on stdout
    .venv/bin/python bench/mutants.py --only 1,2,3,4  # some of them
    .venv/bin/python bench/mutants.py --only 3 --all  # every test a mutant fails (no -x)
    .venv/bin/python bench/mutants.py --root /tmp/old --tests test/py/test_simulator.py,...  # another tree
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
LIT = str(Path(PY).with_name("lit"))
SUBSET = [
    "test/py/test_simulator.py",
    "test/py/test_fast_path.py",
    "test/py/test_dual_unit.py",
    "test/py/test_isa.py",
    "test/py/test_jit.py",
    "test/py/test_mlp_e2e.py",
    "test/py/test_cycles.py",
    "test/py/test_oracle.py",
    "test/py/test_golden.py",
    "test/py/test_attention_ops.py",
    "test/py/test_transformer_ops.py",
]


@dataclass
class Mutant:
    area: str
    path: str
    old: str
    new: str
    what: str


M = Mutant
MUTANTS = [
    # --- the planted bugs of issue 13
    M(
        "simulator",
        "simulator/functional.py",
        'if f["accumulate"]:',
        "if False:",
        "planted 1: MATMUL never accumulates",
    ),
    M(
        "simulator",
        "simulator/fast_forms.py",
        "    np.add(out, acc, acc)  # the readable path's out += acc, written in place",
        "    np.copyto(acc, out)",
        "planted 1 in the fast path: its MATMUL never accumulates",
    ),
    M(
        "tiling",
        "novella_mlir/kernels/__init__.py",
        "return [sy.const(tm), total - sy.dim(dim) * tm]",
        "return [sy.const(tm), total - sy.dim(dim) * tm + 1]",
        "planted 2: partial tiles one row too long",
    ),
    M(
        "jit",
        "novella_mlir/runtime/jit.py",
        "memo[key] = _field_bits(f, expr.evaluate_min(progs, syms, dims))",
        'memo[key] = _field_bits(f, expr.evaluate_min(progs[:1] if f.name in ("rows", "m") else progs, syms, dims))',
        "planted 3: rows/m encoded as the full tile on the last partial tile",
    ),
    M(
        "timing",
        "simulator/timing.py",
        "return _ceil_div(charged, self.config.dram_bytes_per_cycle)",
        "return _ceil_div(charged, 2 * self.config.dram_bytes_per_cycle)",
        "planted 4: DMA cost halved",
    ),
    # --- simulator (functional)
    M(
        "simulator",
        "simulator/functional.py",
        "tile = np.zeros(sidx.shape, dtype=F32)",
        "tile = sram.data[sidx].copy()",
        "LOAD leaves stale SRAM in out-of-bound rows instead of zeros",
    ),
    M(
        "simulator",
        "simulator/functional.py",
        'return (r >= 0) & (r < f["row_bound"]), r',
        'return (r >= 0) & (r <= f["row_bound"]), r',
        "DMA row guard off by one (row_bound inclusive)",
    ),
    M(
        "simulator",
        "simulator/functional.py",
        "REDUCE_OPS = {VecFn.ROWSUM: np.sum, VecFn.ROWMAX: np.max}",
        "REDUCE_OPS = {VecFn.ROWSUM: np.sum, VecFn.ROWMAX: np.mean}",
        "ROWMAX computes the mean",
    ),
    M(
        "simulator",
        "simulator/functional.py",
        "x = np.clip(np.asarray(x, dtype=F32), F32(-4), F32(4))",
        "x = np.clip(np.asarray(x, dtype=F32), F32(-3), F32(3))",
        "ERF clamps at 3 instead of 4",
    ),
    M(
        "simulator",
        "simulator/functional.py",
        "sram.data[sidx] = tile\n        self.effect.dma_bytes = didx.size * 4",
        "sram.data[sidx] = tile\n        self.effect.dma_bytes = sidx.size * 4",
        "LOAD counts zero-filled rows as moved DRAM bytes",
    ),
    # --- timing model and machine
    M(
        "timing",
        "simulator/timing.py",
        "data_start = max(start + c.issue_cycles + c.dma_latency, self.dram_free)",
        "data_start = start + c.issue_cycles + c.dma_latency",
        "DRAM channel not shared by loads and stores",
    ),
    M(
        "timing",
        "simulator/timing.py",
        "passes = _ceil_div(k, rows) * _ceil_div(n, cols)",
        "passes = _ceil_div(k, rows)",
        "MATMUL cost ignores n",
    ),
    M(
        "timing",
        "simulator/timing.py",
        "return rows * _ceil_div(cols, lanes) * per_beat + latency",
        "return rows * _ceil_div(cols, lanes) * per_beat",
        "VEC latency dropped",
    ),
    M(
        "timing",
        "simulator/machine.py",
        "self.channels[ch].push(Token(ready, clock))",
        "self.channels[ch].push(Token(start, clock))",
        "a token is ready when its pusher starts, not ends",
    ),
    M(
        "timing",
        "simulator/machine.py",
        "s.busy[unit] += end - begin",
        "s.busy[unit] = max(s.busy[unit], end - begin)",
        "busy cycles per unit: max instead of sum",
    ),
    M(
        "timing",
        "simulator/machine.py",
        "if best_start is None or start < best_start:",
        "if best_start is None or start <= best_start:",
        "scheduling ties go to the last queue (store, compute, load)",
    ),
    # --- JIT
    M(
        "jit",
        "novella_mlir/runtime/tokens.py",
        'bits["pop_next"][fc[waits]] = True  # C pops S2C\n    bits["push_prev"][ls[need_s[waits]]] = True',
        "pass  # C pops S2C\n    pass",
        "compute does not wait for the previous step's stores (S2C)",
    ),
    M(
        "jit",
        "novella_mlir/runtime/tokens.py",
        "need_l = _once(np.maximum(ks - dist, barrier_before), fl >= 0)",
        "need_l = _once(ks - dist, fl >= 0)",
        "loads after a barrier between macros do not wait for it (a macro's loads overlap the previous one)",
    ),
    M(
        "jit",
        "novella_mlir/runtime/jit.py",
        "key = tuple(map(int, symbols))",
        "key = tuple(int(s) // 2 for s in symbols)",
        "JIT cache key collides for neighbouring lengths",
    ),
    M(
        "jit",
        "novella_mlir/runtime/jit.py",
        'm &= (v == 0) if kind == "eq" else (v >= 0)',
        'm &= (v == 0) if kind == "eq" else (v > 0)',
        "`ge` guards evaluated as strict",
    ),
    M(
        "jit",
        "novella_mlir/runtime/expr.py",
        "out = np.minimum(out, v)",
        "out = np.maximum(out, v)",
        "a min of expressions evaluated as a max",
    ),
    M(
        "jit",
        "novella_mlir/runtime/jit.py",
        '        if rel.dtype.kind not in "iu" or lo + bases[slot] < f.lo or hi + bases[slot] > f.hi:\n            return False',
        '        if rel.dtype.kind not in "iu":\n            return False',
        "JIT stops range-checking dram_base (tensor base + offset)",
    ),
    M(
        "jit",
        "novella_mlir/runtime/executor.py",
        "if v is None or not lo <= v <= hi",
        "if v is None or not lo <= v <= hi + 1",
        "a length one past max_len is accepted",
    ),
    # --- tiling and kernels
    M(
        "tiling",
        "novella_mlir/kernels/linear.py",
        "m_grid = sy.ceildiv(tv.rows(0), tm)",
        "m_grid = sy.floordiv(tv.rows(0), tm)",
        "linear grid drops the partial last row tile",
    ),
    M(
        "tiling",
        "novella_mlir/kernels/linear.py",
        "accumulate=sy.const(1) if g.res_acc else [b.d(2), sy.const(1)],",
        "accumulate=sy.const(1) if g.res_acc else [sy.const(0)],",
        "linear K loop overwrites instead of accumulating",
    ),
    M(
        "tiling",
        "novella_mlir/kernels/linear.py",
        "return self.cost(target, dims, cands[first[c]]), -tm, -tn, rep[c]",
        "return -self.cost(target, dims, cands[first[c]]), -tm, -tn, rep[c]",
        "linear cost model scores negated: the first class by lower bound wins (correct, slower programs)",
    ),
    M(
        "tiling",
        "novella_mlir/kernels/attention.py",
        '    g.vec("MUL", "l", "l", "t", when=rest)\n',
        "",
        "chunked softmax: running sum not rescaled when the max grows",
    ),
    # --- allocation
    M(
        "allocation",
        "novella_mlir/transforms/novella_allocate.py",
        "if self._covers(blk, size):",
        "if True:",
        "DRAM reuse of a freed block that is too small",
    ),
    M(
        "allocation",
        "novella_mlir/transforms/novella_allocate.py",
        "if last_use.get(v) == i and v not in outputs and v not in paged and _is_activation(v):",
        "if v not in outputs and v not in paged and _is_activation(v):",
        "DRAM of a tensor released at its first use, not its last",
    ),
    # --- lowering (inst-gen, artifact)
    M(
        "lowering",
        "novella_mlir/transforms/novella_inst_gen.py",
        "shifted = [e + sy.const(buf.offset) for e in m.results]",
        "shifted = list(m.results)",
        "a variable SRAM offset loses its buffer's base",
    ),
    M(
        "lowering",
        "novella_mlir/dialects/fields.py",
        'MEMS = {"spad": isa.Mem.SPAD, "acc": isa.Mem.ACC}',
        'MEMS = {"spad": isa.Mem.SPAD, "acc": isa.Mem.SPAD}',
        "every buffer placed in the scratchpad",
    ),
    M(
        "lowering",
        "novella_mlir/artifact/extract.py",
        "memo[a] = [(kind, to_postfix(e)) for kind, e in sy.integer_set_constraints(a)]",
        'memo[a] = [("ge", to_postfix(e)) for kind, e in sy.integer_set_constraints(a)]',
        "artifact turns equality guards into inequalities",
    ),
    M(
        "lowering",
        "novella_mlir/kernels/elementwise.py",
        'b.vop("ADD", tmp, tmp, mode="SCALAR", imm=1.0, **geo)',
        'b.vop("ADD", tmp, tmp, mode="SCALAR", imm=1.001, **geo)',
        "gelu epilogue: 1 + erf off by 1e-3",
    ),
    # --- the compute queue's two units (docs/isa.md "Timing model")
    M(
        "timing",
        "simulator/timing.py",
        "if mem == m2 and (write or w2) and lo < hi2 and lo2 < hi:",
        "if mem == m2 and write and w2 and lo < hi2 and lo2 < hi:",
        "scoreboard orders only write/write pairs (RAW and WAR between the units pass)",
    ),
    M(
        "timing",
        "simulator/timing.py",
        "return begin, end, self.retired",
        "return begin, end, end",
        "a compute instruction's tokens are ready at its end, not at in-order retirement",
    ),
]


def _copy_repo(dst: Path, src_root: Path = ROOT) -> None:
    """The work tree's tracked and untracked (not ignored) files, copied to `dst`."""
    if src_root != ROOT:
        shutil.copytree(src_root, dst, dirs_exist_ok=True)
        return
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True)
    for rel in files.stdout.splitlines():
        src = ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def _first_failure(out: str) -> str:
    m = re.search(r"^FAILED (\S+)(?: - (.*))?$", out, re.M) or re.search(r"^ERROR (\S+)(?: - (.*))?$", out, re.M)
    if m:
        return m.group(1) + (f": {m.group(2)[:120]}" if m.group(2) else "")
    m = re.search(r"^\s*(?:FAIL|UNRESOLVED): (.*)$", out, re.M)
    return f"lit {m.group(1)}" if m else out.strip().splitlines()[-1][:160] if out.strip() else "?"


def _failures(out: str) -> list[str]:
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", out, re.M) + [
        f"lit {t}" for t in re.findall(r"^\s*(?:FAIL|UNRESOLVED): (.*)$", out, re.M)
    ]


def run_one(mut: Mutant, all_failures: bool, snapshot: Path, subset=SUBSET) -> tuple[str, str, float]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="novella-mutant-") as tmp:
        work = Path(tmp)
        _copy_repo(work, snapshot)
        target = work / mut.path
        text = target.read_text()
        if text.count(mut.old) != 1:
            return "n/a", f"edit site not found ({text.count(mut.old)} matches)", 0.0
        target.write_text(text.replace(mut.old, mut.new))
        env = dict(os.environ, PYTHONPATH=str(work), NOVELLA_UPDATE_GOLDEN="0")
        lit = subprocess.run([LIT, "-q", "test/lit"], cwd=work, env=env, capture_output=True, text=True)
        stop = [] if all_failures else ["-x"]
        cmd = [PY, "-m", "pytest", *subset, "-q", "-rfE", "-p", "no:cacheprovider", "--tb=line", *stop]
        pyt = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if all_failures:
        fails = _failures(lit.stdout + lit.stderr) + _failures(pyt.stdout)
        return ("killed" if fails else "survived"), "\n      ".join(fails) or "-", secs
    if lit.returncode:
        return "killed", _first_failure(lit.stdout + lit.stderr), secs
    if pyt.returncode:
        return "killed", _first_failure(pyt.stdout), secs
    return "survived", "-", secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutant numbers (1-based)")
    ap.add_argument("--all", action="store_true", help="list every failing test (no -x; slower)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the tree to mutate (default: this repo)")
    ap.add_argument("--tests", help="comma-separated pytest paths (default: the fast subset)")
    args = ap.parse_args()
    chosen = [int(x) for x in args.only.split(",")] if args.only else range(1, len(MUTANTS) + 1)
    subset = args.tests.split(",") if args.tests else SUBSET
    rows = []
    print(
        f"tree: {args.root}\nsubset: lit test/lit + pytest {' '.join(Path(s).name for s in subset)} (-x)\n", flush=True
    )
    print(f"{'#':>2}  {'area':<10} {'mutant':<66} {'result':<8} {'s':>5}  first failing test", flush=True)
    with tempfile.TemporaryDirectory(prefix="novella-snapshot-") as snap:
        _copy_repo(Path(snap), args.root.resolve())  # one snapshot: later edits do not leak in
        for i in chosen:
            mut = MUTANTS[i - 1]
            result, by, secs = run_one(mut, args.all, Path(snap), subset)
            rows.append(result)
            print(f"{i:>2}  {mut.area:<10} {mut.what[:66]:<66} {result:<8} {secs:5.0f}  {by}", flush=True)
    scored = [r for r in rows if r != "n/a"]
    killed = sum(r == "killed" for r in scored)
    print(f"\nmutation score: {killed}/{len(scored)} killed = {killed / max(len(scored), 1):.0%}", flush=True)


if __name__ == "__main__":
    main()
