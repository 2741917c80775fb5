"""Decoding with the paged KV cache (issue 9), measured side by side in one run.

  * per-token cycles of a decode step as the past grows, against the decode roofline
    max(MACs / MACs per cycle, (weights + K/V bytes read + K/V bytes written) / DRAM bandwidth);
  * host JIT time per step against the NPU step time (its cycles at the config's clock): a step patches
    the injected fields of its bucket's program (`runtime/step.py`); a new key/value tile count
    instantiates a bucket once;
  * a decode step against the no-cache baseline (prefill re-run on the whole sequence);
  * KV memory in use, paged vs an allocation of max_len per sequence;
  * with --sizes: MacroMeta + TileMeta bytes of both programs at max_len 1024 and 8192.

  * with --compare: the same steps compiled with fuse_attention=False (matmul -> softmax -> matmul,
    scores in DRAM) side by side with the fused attention over the pages.

  * with --batch-sizes (default 1,4,16,32,64) and --batch-pasts (16,256,1000): a decode step of B
    sequences against the batched roofline max(MACs / MACs per cycle, (weights + every sequence's
    K/V read + written) / DRAM bandwidth), tokens per million cycles against B, mixed past lengths,
    JIT host time per step against the NPU step; and the engine's page utilization on requests with
    a common prefix, sharing on and off (`decoding/engine.py`).

Usage: python bench/decode.py [--model gpt2|llama] [--max-len 1024] [--pasts 16,64,256,1000] [--sizes] [--compare]
       [--batch-sizes 1,4,16,32,64] [--batch-pasts 16,256,1000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import transformers as tf

from novella_mlir.causal_lm import compile_causal_lm
from novella_mlir.decoding.batched import compile_batched
from novella_mlir.runtime.kv import BlockTable


def build(kind: str, max_len: int):
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=max_len,
                            bos_token_id=0, eos_token_id=1)  # fmt: skip
        return tf.GPT2LMHeadModel(cfg).eval()
    cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=256, vocab_size=512, max_position_embeddings=max_len,
                         bos_token_id=0, eos_token_id=1)  # fmt: skip
    return tf.LlamaForCausalLM(cfg).eval()


def weight_bytes(model, rows: int = 1) -> int:
    """Compulsory weight bytes: every parameter once, except an embedding table's rows no token picks
    (`rows` tokens pick at most `rows` rows each; an output projection tied to an embedding is read whole)."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head = out.weight if out is not None else None
    emb = {id(m.weight): m.weight.shape for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    unique = {id(p): p for p in model.parameters()}
    total = 0
    for k, p in unique.items():
        total += p.numel() * 4 if (k not in emb or p is head) else min(rows, emb[k][0]) * emb[k][1] * 4
    return total


def decode_step(lm, sess, past: int):
    """(stats, host seconds of a new bucket, host seconds of a patched step) at `past` (cache contents
    arbitrary: cycles only). The patch is the median of 5 steps at past-4 .. past in one bucket."""
    table = BlockTable()
    sess.pool.reserve(table, past + 1)
    inputs = {0: np.array([[5.0]], np.float32), 1: np.array([[float(past)]], np.float32)}
    sess.steppers["decode"].clear()
    lm.decode.jit.cache.clear()
    _, stats, new_s, _, _, new = sess.run("decode", inputs, (past,), table)
    assert new
    stepper, blocks = sess.steppers["decode"], np.asarray(table.blocks, np.int64)
    key = stepper.plan.key([past])
    patch = []
    for p in range(max(1, past - 4), past + 1):
        if stepper.plan.key([p]) == key:
            t0 = time.perf_counter()
            stepper.words((p,), blocks)
            patch.append(time.perf_counter() - t0)
    sess.pool.release(table)
    return stats, new_s, float(np.median(patch))


def generation(lm, n_new: int = 32):
    """Mean host JIT seconds and mean NPU seconds per decode step of one greedy generation."""
    lm.session(check_hazards=False).steppers["decode"].clear()
    lm.generate(torch.randint(3, 500, (1, 7), generator=torch.Generator().manual_seed(0)), n_new, check_hazards=False)
    dec = [s for s in lm.last_run.steps if s.kind == "decode"]
    return (
        dec,
        np.mean([s.jit_seconds for s in dec]),
        np.mean([s.cycles for s in dec]) / (lm.prefill.config.clock_ghz * 1e9),
    )


def prefill_cycles(sess, length: int) -> int:
    table = BlockTable()
    sess.pool.reserve(table, length)
    _, stats, *_ = sess.run("prefill", {0: np.full((1, length), 5.0, np.float32)}, (length,), table)
    sess.pool.release(table)
    return stats.cycles


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=("gpt2", "llama"))
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--pasts", default="1,16,64,256,1000")
    ap.add_argument("--sizes", action="store_true")
    ap.add_argument("--batch-sizes", default="1,4,16,32,64", help="batched steps and sharing ('' skips them)")
    ap.add_argument("--batch-pasts", default="16,256,1000")
    ap.add_argument("--compare", action="store_true", help="also compile with fuse_attention=False, side by side")
    args = ap.parse_args()
    hf = build(args.model, args.max_len)
    t0 = time.perf_counter()
    sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    batch = max(sizes + [3])  # a page more per sequence than max_len: `batched_step` decodes 16 steps past each past
    pages = (batch + 1) * (-(-args.max_len // args.page_size) + 1)
    lm = compile_causal_lm(hf, max_len=args.max_len, page_size=args.page_size, max_batch=batch, n_pages=pages)
    if sizes:
        t1 = time.perf_counter()
        compile_batched(hf, lm, sizes)
        print(f"batched decode programs for B = {sizes} compiled in {time.perf_counter() - t1:.1f} s")
    print(f"{args.model}: compiled prefill + decode for max_len {args.max_len} in {time.perf_counter() - t0:.1f} s")
    sess = lm.session(check_hazards=False)
    cfg = lm.prefill.config
    bw, mpc = cfg.dram_bytes_per_cycle, cfg.macs_per_cycle
    slots = lm.decode.artifact.kv["slots"]
    kv_row = sum(s["heads"] * s["head_dim"] for s in slots) * 4  # bytes per position, all layers, K and V
    wb = weight_bytes(hf)
    print(
        f"compulsory weights {wb:,} B (artifact holds {lm.decode.artifact.weight_nbytes:,} B), K/V {kv_row} B per position; DRAM {bw} B/cycle, {mpc} MACs/cycle, {cfg.clock_ghz:g} GHz\n"
    )
    print("per-token decode cycles vs past length and the decode roofline")
    print(
        "(JIT new: a key/value tile count's first step instantiates its bucket; JIT step: the patch of every later step)"
    )
    print(f"{'past':>6} {'cycles':>9} {'DMA B':>10} {'roof':>9} {'cyc/roof':>8} {'JIT new us':>10} {'JIT step us':>11} "
          f"{'NPU us':>8} {'step/NPU':>8} {'new/NPU':>7} {'prefill(P+1)':>12} {'no-cache x':>10}")  # fmt: skip
    pasts = [int(p) for p in args.pasts.split(",") if int(p) < args.max_len]
    fused = {}
    decode_step(lm, sess, pasts[0])  # numba builds (or loads) its kernels on first use: not a step's JIT time
    for past in pasts:
        stats, jit_new, jit_step = decode_step(lm, sess, past)
        roof = max(stats.macs / mpc, (wb + kv_row * (past + 2)) / bw)  # K/V of past + 1 read, 1 written
        npu_us = stats.cycles / (cfg.clock_ghz * 1e3)
        base = prefill_cycles(sess, past + 1)
        fused[past] = (stats.cycles, jit_step, base, roof)
        print(f"{past:>6} {stats.cycles:>9,} {stats.dma_bytes_loaded + stats.dma_bytes_stored:>10,} {roof:>9,.0f} "
              f"{stats.cycles / roof:>8.2f} {jit_new * 1e6:>10.0f} {jit_step * 1e6:>11.1f} {npu_us:>8.1f} "
              f"{jit_step * 1e6 / npu_us:>8.3f} {jit_new * 1e6 / npu_us:>7.2f} {base:>12,} {base / stats.cycles:>10.1f}")  # fmt: skip
    if args.compare:
        compare(hf, args, pasts, fused)
    dec, jit_mean, npu_mean = generation(lm)
    new = [s.jit_seconds for s in dec if s.new_bucket]
    patched = [s.jit_seconds for s in dec if not s.new_bucket]
    med = float(np.median([s.jit_seconds for s in dec]))
    print(
        f"\ngreedy generation, 7-token prompt, {len(dec) + 1} tokens, {len(dec)} decode steps, NPU {npu_mean * 1e6:.1f} us "
        f"per step: JIT per step mean {jit_mean * 1e6:.1f} us ({jit_mean / npu_mean:.3f} of NPU), median {med * 1e6:.1f} us "
        f"({med / npu_mean:.3f}); {len(new)} steps instantiated a bucket (median {np.median(new) * 1e6:.0f} us), "
        f"{len(patched)} patched (median {np.median(patched) * 1e6:.1f} us, {np.median(patched) / npu_mean:.3f} of NPU). "
        "(2 shared cores: a timed step may include a preemption of several ms; the median is robust to it)"
    )
    print(f"\nKV memory: paged (page_size {args.page_size}) vs max_len per sequence")
    lengths = [39, 140, 532]
    per_block = sess.kv_bytes_per_block
    paged = sum(-(-n // args.page_size) for n in lengths) * per_block
    contiguous = len(lengths) * args.max_len * kv_row
    used = sum(lengths) * kv_row
    print(
        f"sequences of {lengths} positions: used {used:,} B, paged {paged:,} B ({used / paged:.1%} utilized), "
        f"contiguous {contiguous:,} B ({used / contiguous:.1%} utilized)"
    )
    if args.batch_sizes:
        batched(lm, wb, kv_row, sizes, [int(p) for p in args.batch_pasts.split(",") if int(p) < args.max_len])
        sharing(lm)
    if args.sizes:
        print("\nMacroMeta + TileMeta bytes of both programs")
        for n in (1024, 8192):
            m = compile_causal_lm(build(args.model, n), max_len=n, page_size=args.page_size)
            print(
                f"max_len {n:>5}: {m.nbytes:,} B (prefill {m.prefill.artifact.nbytes:,}, decode "
                f"{m.decode.artifact.nbytes:,}); weights {m.decode.artifact.weight_nbytes:,} B"
            )


def compare(hf, args, pasts, fused: dict) -> None:
    """The same decode steps and prefills compiled with fuse_attention=False, beside the fused ones."""
    lm = compile_causal_lm(hf, max_len=args.max_len, page_size=args.page_size, max_batch=3, fuse_attention=False)
    sess = lm.session(check_hazards=False)
    print("\nfused attention over the pages vs matmul -> softmax -> matmul (fuse_attention=False), same run")
    print(f"{'past':>6} {'unfused':>9} {'fused':>9} {'gain':>6} {'roof':>9} {'cyc/roof':>17} {'JIT step us':>17} "
          f"{'prefill(P+1) unfused':>20} {'fused':>12} {'gain':>6}")  # fmt: skip
    for past in pasts:
        stats, _, jit_step = decode_step(lm, sess, past)
        cyc, jit_f, base_f, roof = fused[past]
        base = prefill_cycles(sess, past + 1)
        print(f"{past:>6} {stats.cycles:>9,} {cyc:>9,} {stats.cycles / cyc:>6.2f} {roof:>9,.0f} "
              f"{stats.cycles / roof:>8.2f} {cyc / roof:>8.2f} {jit_step * 1e6:>8.1f} {jit_f * 1e6:>8.1f} "
              f"{base:>20,} {base_f:>12,} {base / base_f:>6.2f}")  # fmt: skip


def _best(passes: list) -> dict:
    """Of the passes after the first (which warms every bucket), the one of least JIT time (2 shared
    cores: a pass may include a preemption of several ms)."""
    return min(passes[1:], key=lambda o: o["jit"])


def _tables(sess, rows: list) -> list:
    tables = []
    for n in rows:
        t = BlockTable()
        sess.pool.reserve(t, n)
        tables.append(t)
    return tables


def apart_step(sess, pasts: list) -> dict:
    """A decode step of len(pasts) sequences as separate single-sequence decode programs, each over
    its own block table (cache contents arbitrary: cycles only); four passes (`_best`)."""
    tables, passes = _tables(sess, [p + 1 for p in pasts]), []
    try:
        for _ in range(4):
            out = {"cycles": 0, "macs": 0, "dma": 0, "jit": 0.0}
            for p, t in zip(pasts, tables):
                inputs = {0: np.array([[5.0]], np.float32), 1: np.array([[float(p)]], np.float32)}
                _, stats, jit_s, *_ = sess.run("decode", inputs, (p,), t)
                out["cycles"] += stats.cycles
                out["macs"] += stats.macs
                out["dma"] += stats.dma_bytes_loaded + stats.dma_bytes_stored
                out["jit"] += jit_s
            passes.append(out)
    finally:
        for t in tables:
            sess.pool.release(t)
    return _best(passes)


def _rebuilt(step, stepper, ls, clock, build, n: int = 3) -> float:
    """Seconds of `build` (a bucket's instantiation) right after a simulator run (host caches cold), every
    bucket dropped before each, and the JIT's instantiations (a new bucket's symbol values are new: its
    words are the JIT kernel's, not its cache's), best of n (2 shared cores: one sample may include a
    preemption)."""
    best = float("inf")
    for _ in range(n):
        step.run(ls, clock)
        stepper.clear()  # the steps' buckets are built again as needed
        stepper.jit.cache.clear()
        t0 = time.perf_counter()
        build()
        best = min(best, time.perf_counter() - t0)
    return best


def batched_step(sess, n: int, pasts: list, null: int) -> dict:
    """One batched decode program of bucket n over len(pasts) lanes at the storage clock max(pasts),
    each lane at the row offset and null pages the clock asks (`runtime/batch.py`). Four passes, each
    a decode step one position further than the last (the lanes' block tables grown a page when they
    fill one): cycles of the first, JIT of the best later one (after a simulator run: host caches
    cold). Warm: the patches of 16 consecutive steps (a page's worth: every lane crosses a page)
    back to back, their mean and max. Fill: the host's block array of the step (`BatchStep.fill`, from
    the lanes' block lists; not the JIT's, measured apart, best of 3). New (the clock's bucket
    instantiated and patched) and the neighbour's instantiation: each after a simulator run, best of 3
    (`_rebuilt`)."""
    from novella_mlir.runtime.batch import BatchStep, Lane

    ps, clock = sess.page_size, max(pasts)
    offs = [(clock - p) % ps for p in pasts]
    tables, passes = _tables(sess, [p + r + 1 + ps for p, r in zip(pasts, offs)]), []
    step = BatchStep(sess, f"batch{n}", n, null)

    def lanes(k: int) -> list:
        return [Lane(5, p + k, (clock - p - r) // ps, t.blocks[: -(-(p + r + k + 1) // ps)], r)
                for p, r, t in zip(pasts, offs, tables)]  # fmt: skip

    try:
        for k in range(4):
            ls = lanes(k)
            t0 = time.perf_counter()
            step.fill(ls, clock + k)
            fill_s = time.perf_counter() - t0
            _, stats, jit_s, *_, fresh = step.run(ls, clock + k)
            passes.append({"cycles": stats.cycles, "macs": stats.macs, "jit": jit_s, "fill": fill_s, "new": fresh,
                           "dma": stats.dma_bytes_loaded + stats.dma_bytes_stored})  # fmt: skip
        stepper, warm = sess.steppers[f"batch{n}"], []
        fields = step.starts(lanes(0), clock)  # the lanes' fields stay while the clock moves

        def syms(c):
            return (c, *fields)

        key = stepper.plan.key(syms(clock))
        lo, hi = stepper.art.programs[stepper.art.pick((clock,))].ranges[0]
        span = sum(stepper.plan.key(syms(c)) == key for c in range(lo, hi + 1))
        nxt = next((c for c in range(clock + 1, hi + 1) if stepper.plan.key(syms(c)) != key), None)
        cross = float("nan")
        if nxt is not None and stepper.plan.key(syms(nxt)) not in stepper.buckets:  # a sequence crossing the bound
            cross = _rebuilt(step, stepper, lanes(0), clock, lambda: stepper.bucket(syms(nxt)))
        if passes[0]["new"]:
            blocks = step.fill(lanes(0), clock)
            passes[0]["jit"] = _rebuilt(step, stepper, lanes(0), clock, lambda: stepper.words(syms(clock), blocks))
        filled = [step.fill(lanes(k), clock + k).copy() for k in range(ps)]
        for k in list(range(ps)) * 2:  # the first round instantiates any bucket the page's steps need
            t0 = time.perf_counter()
            stepper.words(syms(clock + k), filled[k])
            warm.append(time.perf_counter() - t0)
    finally:
        for t in tables:
            sess.pool.release(t)
    return {**passes[0], "jit": min(o["jit"] for o in passes[1:]), "fill": min(o["fill"] for o in passes[1:]),
            "inst": passes[0]["jit"] if passes[0]["new"] else float("nan"), "span": span, "cross": cross,
            "warm": float(np.mean(warm[ps:])),
            "warm_max": max(warm[ps:])}  # fmt: skip


def batched(lm, wb: int, kv_row: int, sizes: list, pasts: list) -> None:
    """Cycles per step of B sequences against the batched decode roofline, tokens per million cycles,
    mixed past lengths, and the JIT host time per step against the NPU step."""
    sess = lm.session(check_hazards=False)
    cfg = lm.prefill.config
    bw, mpc = cfg.dram_bytes_per_cycle, cfg.macs_per_cycle
    null = BlockTable()
    sess.pool.reserve(null, 1)
    macs = {}  # the model's MACs of one sequence's step at a past: the single-sequence program's

    def model_macs(p):
        if p not in macs:
            macs[p] = apart_step(sess, [p])["macs"]
        return macs[p]

    print("\nbatched decode step: one program for B sequences (the weights read once), vs B single-sequence programs")
    print(
        "roofline: max(model MACs / MACs per cycle, (weights once + every sequence's K/V read + written) / DRAM B/cycle)"
    )
    print(
        "JIT: the step's patch as run (a step one position further, after a simulator run: host caches cold; best of 3);"
    )
    print("warm: 16 consecutive steps' patches back to back (every lane crosses a page), mean and max;")
    print("fill: the step's block array built from the lanes' block lists (host, not the JIT's; best of 3)")
    print("new: the step's JIT when it instantiates the clock's bucket (the JIT kernel's words included), after a")
    print("simulator run, best of 3 (nan: built by an earlier row); amort: it spread over the steps of its bucket")
    print("(the clocks of the same key), against the NPU step;")
    print("next: the neighbouring bucket's instantiation (the next key up: a sequence crossing the bound), its amort")
    print(f"{'B':>3} {'past':>10} {'cycles':>10} {'DMA B':>11} {'roof':>9} {'cyc/roof':>8} {'tok/Mcyc':>8} "
          f"{'x B=1':>6} {'apart cyc':>11} {'apart/roof':>10} {'gain':>5} {'JIT us':>7} {'NPU us':>8} {'JIT/NPU':>7} "
          f"{'warm us':>7} {'warm/NPU':>8} {'max/NPU':>7} {'fill us':>7} {'new ms':>7} {'amort/NPU':>9} {'next ms':>7} "
          f"{'amort/NPU':>9}")  # fmt: skip
    rng = np.random.default_rng(0)
    for past in pasts + [None]:
        base = None
        for b in sizes:
            ps = [past] * b if past is not None else sorted(rng.integers(16, max(pasts) + 1, b).tolist())
            r, apart = batched_step(sess, b, ps, null.blocks[0]), apart_step(sess, ps)
            roof = max(sum(model_macs(p) for p in ps) / mpc, (wb + sum(kv_row * (p + 2) for p in ps)) / bw)
            tok = b / r["cycles"] * 1e6
            base = base or tok
            npu_us = r["cycles"] / (cfg.clock_ghz * 1e3)
            lab = str(past) if past is not None else f"16..{max(pasts)}"
            print(f"{b:>3} {lab:>10} {r['cycles']:>10,} {r['dma']:>11,} {roof:>9,.0f} {r['cycles'] / roof:>8.2f} "
                  f"{tok:>8.1f} {tok / base:>6.2f} {apart['cycles']:>11,} {apart['cycles'] / roof:>10.2f} "
                  f"{apart['cycles'] / r['cycles']:>5.1f} {r['jit'] * 1e6:>7.0f} {npu_us:>8.1f} "
                  f"{r['jit'] * 1e6 / npu_us:>7.3f} {r['warm'] * 1e6:>7.1f} {r['warm'] * 1e6 / npu_us:>8.3f} "
                  f"{r['warm_max'] * 1e6 / npu_us:>7.3f} {r['fill'] * 1e6:>7.1f} {r['inst'] * 1e3:>7.1f} "
                  f"{r['inst'] * 1e6 / r['span'] / npu_us:>9.3f} {r['cross'] * 1e3:>7.1f} "
                  f"{r['cross'] * 1e6 / r['span'] / npu_us:>9.3f}")  # fmt: skip
    sess.pool.release(null)


def sharing(lm, n_req: int = 8, prefix: int = 96, new: int = 16) -> None:
    """Page utilization of the continuous-batching engine on requests with a common prompt prefix,
    prefix sharing on and off: pages held, positions cached per page held, NPU cycles."""
    from novella_mlir.decoding.engine import Engine

    n_req = min(n_req, lm.max_batch)
    g = torch.Generator().manual_seed(1)
    head = torch.randint(3, 500, (prefix,), generator=g).tolist()
    prompts = [
        head + torch.randint(3, 500, (int(n),), generator=g).tolist()
        for n in torch.randint(4, 40, (n_req,), generator=g)
    ]
    print(
        f"\ncontinuous batching of {n_req} requests with a {prefix}-token common prefix (suffixes 4..39 tokens), "
        f"{new} new tokens each, max_batch {n_req}, page_size {lm.page_size}"
    )
    print("(pages held include the batched step's null block; positions/page > 1: pages held by several sequences)")
    print(f"{'sharing':>7} {'peak pages':>10} {'mean pages':>10} {'positions/page':>14} {'copies':>6} {'prefills':>8} "
          f"{'batch steps':>11} {'relayout MB':>11} {'NPU Mcycles':>11} {'tokens':>6}")  # fmt: skip
    for share in (False, True):
        eng = Engine(lm, max_batch=n_req, check_hazards=False, share_prefix=share)
        reqs = [eng.add(p, new) for p in prompts]
        pages, util = [], []
        while not eng.done:
            eng.step()
            held = eng.pool.in_use
            if held:
                pages.append(held)
                util.append(sum(r.table.length for r in eng.running) / (held * lm.page_size))
        eng.close()
        steps = eng.run.steps
        kinds = [s.kind for s in steps]
        print(f"{'on' if share else 'off':>7} {max(pages):>10} {np.mean(pages):>10.1f} {np.mean(util):>14.2f} "
              f"{eng.copies:>6} {kinds.count('prefill'):>8} {kinds.count('batch') + kinds.count('decode'):>11} "
              f"{eng.moved / 1e6:>11.2f} "
              f"{sum(s.cycles for s in steps) / 1e6:>11.2f} {sum(len(r.generated) for r in reqs):>6}")  # fmt: skip


if __name__ == "__main__":
    main()
