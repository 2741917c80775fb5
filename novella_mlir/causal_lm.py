"""`compile_causal_lm`: a transformers-style causal LM as a prefill and a decode program over a paged
KV cache resident in NPU DRAM, and `generate` (greedy) on the simulator.

Both programs are exported from the model's own forward with the cache as explicit tensors:
  * prefill `(input_ids[1, T]) -> (logits, k0, v0, k1, v1, ...)`, T symbolic in [1, max_len];
  * decode `(input_ids[1, 1], position_ids[1, 1], k0, v0, ...) -> (logits, k0', v0', ...)` with the
    past length P symbolic in [1, max_len - 1]; the model extends each layer's cache itself
    (`DynamicCache.update`: a `cat(past, new)` in the graph).
`--novella-kv-cache` recognizes the cache in the graphs and pages it; `runtime/kv.py` runs both
programs on one DRAM. Decode attends over exactly the P + 1 valid positions.
"""

from __future__ import annotations

import inspect
import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.export import Dim

from .errors import CompileError, InputError
from .pipeline import compile_torch
from .runtime.kv import BlockTable, Session


class _Prefill(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        out = self.lm(input_ids=input_ids, use_cache=True)
        return (out.logits, *_cache_tensors(_out_cache(out)))


class _Decode(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, position_ids, *kv):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.lm.config)
        for layer in range(len(kv) // 2):
            cache.update(kv[2 * layer], kv[2 * layer + 1], layer)
        kw = {_cache_param(self.lm): cache}
        out = self.lm(input_ids=input_ids, position_ids=position_ids, use_cache=True, **kw)
        return (out.logits, *_cache_tensors(_out_cache(out)))


def _cache_param(model) -> str:
    """The forward parameter taking the cache: `cache` (transformers >= 5.2x) or `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _out_cache(out):
    return getattr(out, "cache", None) or getattr(out, "past_key_values", None)


def _cache_tensors(cache) -> list:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


def check_convention(model) -> tuple[int, list]:
    """(vocab size, example cache tensors) of a model called like transformers' *ForCausalLM, or an
    InputError saying what is missing."""
    name = type(model).__name__
    params = inspect.signature(model.forward).parameters
    missing = [p for p in ("input_ids", "position_ids", "use_cache") if p not in params]
    if "cache" not in params and "past_key_values" not in params:
        missing.append("cache / past_key_values")
    if missing or not hasattr(model, "config"):
        what = f"forward takes no {', '.join(missing)}" if missing else "it has no .config"
        raise InputError(
            f"{name} does not follow the causal-LM call convention ({what}); compile_causal_lm needs a "
            "transformers-style model(input_ids=, position_ids=, cache= (or past_key_values=), use_cache=True) "
            "returning .logits and the cache"
        )
    with torch.no_grad():
        out = model(input_ids=torch.zeros(1, 2, dtype=torch.long), use_cache=True)
    logits, cache = getattr(out, "logits", None), _out_cache(out)
    if logits is None or cache is None or not hasattr(cache, "layers"):
        raise InputError(f"{name} returned no .logits or no layered cache (a transformers Cache)")
    return int(logits.shape[-1]), _cache_tensors(cache)


def pass_options(page_size: int, fuse_attention: bool = True) -> dict:
    """The options both programs compile with: a paged cache, and DRAM offsets fixed at the upper bounds
    (no tensor base moves with the length, so a step only patches the injected fields: `runtime/step.py`).
    Attention is fused (`novella.flash_attention`; decode's reads its keys and values from their pages)
    unless `fuse_attention` is False (matmul -> softmax -> matmul, the scores in DRAM)."""
    return {
        "novella-kv-cache": {"page-size": page_size},
        "novella-allocate": {"fixed-offsets": 1},
        "novella-legalize": {"fuse-attention": int(fuse_attention)},
    }


def compile_causal_lm(
    model, max_len: int, page_size: int = 16, *, n_pages: int | None = None, max_batch: int = 4,
    config=None, cache: bool | None = None, fuse_attention: bool = True,
) -> CausalLM:  # fmt: skip
    """Compiles `model` (a transformers-style causal LM, eval mode) once for prompts and caches up to
    `max_len` positions. The page pool holds `n_pages` blocks (default: `max_batch` sequences of
    `max_len`). `fuse_attention=False` keeps attention's three kernels (for comparison)."""
    model = model.eval()
    if max_len < 2:
        raise InputError(f"max_len must be >= 2 (one prompt token and one generated), got {max_len}")
    vocab, example = check_convention(model)
    options = pass_options(page_size, fuse_attention)
    t0 = time.perf_counter()
    prefill = compile_torch(
        _Prefill(model), torch.zeros(1, 2, dtype=torch.long),
        dynamic_shapes=({1: Dim("T", min=1, max=max_len)},), config=config, pass_options=options, cache=cache,
    )  # fmt: skip
    past = Dim("past", min=1, max=max_len - 1)
    kv = tuple(torch.zeros_like(t) for t in example)
    decode = compile_torch(
        _Decode(model), torch.zeros(1, 1, dtype=torch.long), torch.full((1, 1), 2, dtype=torch.long), *kv,
        dynamic_shapes=(None, None, tuple({2: past} for _ in kv)), config=config, pass_options=options, cache=cache,
    )  # fmt: skip
    for name, m in (("prefill", prefill), ("decode", decode)):
        if len(m.artifact.kv.get("outputs", [])) != len(example):
            raise CompileError(
                f"the {name} program's KV cache was not recognized ({len(m.artifact.kv.get('outputs', []))} "
                f"of {len(example)} cache tensors); the model must extend its cache with cat(past, new), or write "
                "position P of a grown cache with index_copy, slice_scatter or index_put"
            )
    pages = n_pages if n_pages is not None else max_batch * -(-max_len // page_size)
    return CausalLM(prefill, decode, vocab, max_len, page_size, pages, time.perf_counter() - t0)


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
    new_bucket: bool = False  # the step's structure (page count) was instantiated now
    words: np.ndarray = field(repr=False, default=None)  # a copy of the words run (generate(keep_words=True))


@dataclass
class GenerateRun:
    steps: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # per sequence: [n_generated, vocab] (the logits of each step)
    kv_bytes_max_len: int = 0  # what allocating max_len positions per sequence would take
    kv_bytes_peak: int = 0
    tokens: int = 0  # generated, all sequences
    seconds: float = 0.0  # host wall time of the whole generate()

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


class CausalLM:
    """A causal LM compiled as prefill + decode; `generate` runs greedy decoding on the simulator."""

    def __init__(self, prefill, decode, vocab: int, max_len: int, page_size: int, n_pages: int, seconds=0.0):
        self.prefill, self.decode = prefill, decode
        self.vocab, self.max_len, self.page_size, self.n_pages = vocab, max_len, page_size, n_pages
        self.compile_seconds = seconds
        self.last_run: GenerateRun | None = None
        self._session: Session | None = None
        self._keep_words = False

    @property
    def nbytes(self) -> int:
        """MacroMeta + TileMeta bytes of both programs."""
        return self.prefill.artifact.nbytes + self.decode.artifact.nbytes

    def session(self, check_hazards: bool = True) -> Session:
        """The NPU session (weights written once; its DRAM holds the cache between steps)."""
        if self._session is None or self._session.sim.check_hazards != check_hazards:
            models = {"prefill": self.prefill, "decode": self.decode}
            self._session = Session(models, self.prefill.config, self.n_pages, check_hazards=check_hazards)
        return self._session

    def generate(
        self, prompts, max_new_tokens: int, eos_token_id: int | None = None, check_hazards: bool = True,
        keep_words: bool = False, progress: bool | None = None,
    ):  # fmt: skip
        """Greedy decoding. A [1, T] LongTensor gives [1, T + N]; a list of 1-D prompts gives a list, the
        sequences decoded together on one page pool. Stops early at `eos_token_id` only when given.
        `keep_words`: each Step keeps a copy of the instruction words it ran. `progress`: a tqdm bar of the
        generated tokens with tokens per second (default: on a terminal; NOVELLA_PROGRESS=0/1 overrides);
        `last_run.tokens_per_second` either way."""
        self._keep_words = keep_words
        single = isinstance(prompts, torch.Tensor)
        seqs = [self._check_prompt(p, single) for p in ([prompts] if single else list(prompts))]
        if max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        for i, s in enumerate(seqs):
            if len(s) + max_new_tokens > self.max_len:
                raise InputError(
                    f"prompt #{i} has {len(s)} tokens; generating {max_new_tokens} more would pass "
                    f"max_len={self.max_len}; lower max_new_tokens or compile with a larger max_len"
                )
        sess = self.session(check_hazards)
        run = GenerateRun(kv_bytes_max_len=len(seqs) * self.max_len * sess.block_elems // self.page_size * 4)
        self.last_run = run
        tables = [BlockTable() for _ in seqs]
        t0 = time.perf_counter()
        bar = _token_bar(len(seqs) * max_new_tokens, progress)
        try:
            self._decode_all(sess, seqs, tables, max_new_tokens, eos_token_id, run, bar)
        finally:
            bar.close()
            for t in tables:
                sess.pool.release(t)
        run.seconds = time.perf_counter() - t0
        outs = [torch.tensor(s, dtype=torch.long) for s in seqs]
        return outs[0][None, :] if single else outs

    def _check_prompt(self, p, single: bool) -> list:
        if not isinstance(p, torch.Tensor) or p.dtype not in (torch.long, torch.int32, torch.int64):
            raise InputError("a prompt must be an integer torch.Tensor of token ids ([1, T], or 1-D in a list)")
        if single and (p.dim() != 2 or p.shape[0] != 1):
            raise InputError(f"a single prompt must be [1, T], got {list(p.shape)}; pass a list for a batch")
        ids = p.reshape(-1).tolist()
        if not ids:
            raise InputError("the prompt is empty; give at least one token")
        if len(ids) > self.max_len:
            raise InputError(f"the prompt has {len(ids)} tokens, more than max_len={self.max_len}")
        bad = [t for t in ids if not 0 <= t < self.vocab]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab})")
        return ids

    def _decode_all(self, sess, seqs, tables, n_new, eos, run, bar) -> None:
        active = []
        for i, (ids, table) in enumerate(zip(seqs, tables)):
            logits = self._prefill(sess, i, ids, table, run)
            run.logits.append([])
            if n_new:
                self._emit(seqs[i], logits, run, i, bar)
                active.append(i)
        for _ in range(n_new - 1):
            active = [i for i in active if eos is None or seqs[i][-1] != eos]
            for i in active:
                logits = self._step(sess, i, seqs[i], tables[i], run)
                self._emit(seqs[i], logits, run, i, bar)
        for i in range(len(seqs)):
            run.logits[i] = np.stack(run.logits[i]) if run.logits[i] else np.zeros((0, self.vocab), np.float32)

    @staticmethod
    def _emit(seq, logits, run, i, bar) -> None:
        run.logits[i].append(logits)
        seq.append(int(np.argmax(logits)))
        run.tokens += 1
        bar.update(1)

    def _prefill(self, sess, i, ids, table, run):
        sess.pool.reserve(table, len(ids))
        x = np.asarray(ids, np.float32)[None, :]
        outs, *res = sess.run("prefill", {0: x}, (len(ids),), table)
        table.length = len(ids)
        self._record(run, sess, "prefill", i, len(ids), *res)
        return outs[0][0, -1]

    def _step(self, sess, i, seq, table, run):
        past = table.length
        sess.pool.reserve(table, past + 1)
        inputs = {0: np.array([[seq[-1]]], np.float32), 1: np.array([[past]], np.float32)}
        outs, *res = sess.run("decode", inputs, (past,), table)
        table.length = past + 1
        self._record(run, sess, "decode", i, past, *res)
        return outs[0][0, -1]

    def _record(self, run, sess, kind, i, position, stats, jit_s, sim_s, words, new) -> None:
        kv = sess.pool.in_use * sess.kv_bytes_per_block
        run.kv_bytes_peak = max(run.kv_bytes_peak, kv)
        run.steps.append(
            Step(kind, i, position, stats.cycles, stats.dma_bytes_loaded + stats.dma_bytes_stored, jit_s, sim_s,
                 sess.pool.in_use, kv, stats.instructions, new, words.copy() if self._keep_words else None)
        )  # fmt: skip

    def save(self, path) -> None:
        """Both programs in one file: `NVCL`, a JSON header (sizes, max_len, page_size), then each artifact."""
        import tempfile

        blobs = []
        for m in (self.prefill, self.decode):
            with tempfile.TemporaryDirectory() as d:
                m.save(Path(d) / "a.nvla")
                blobs.append((Path(d) / "a.nvla").read_bytes())
        head = json.dumps({"sizes": [len(b) for b in blobs], "vocab": self.vocab, "max_len": self.max_len,
                           "page_size": self.page_size, "n_pages": self.n_pages}).encode()  # fmt: skip
        Path(path).write_bytes(b"NVCL" + struct.pack("<I", len(head)) + head + b"".join(blobs))


def _token_bar(total: int, progress: bool | None):
    import sys

    from tqdm import tqdm

    from simulator.first_build import enabled

    on = enabled() if progress is None else progress
    return tqdm(total=total, desc="generate", unit="tok", file=sys.stderr, disable=not on)


def load_causal_lm(path, config=None) -> CausalLM:
    """Reads a file written by `CausalLM.save`."""
    import tempfile

    from .pipeline import load

    data = Path(path).read_bytes()
    if data[:4] != b"NVCL":
        raise InputError(f"{path} is not a novella causal-LM artifact")
    (n,) = struct.unpack("<I", data[4:8])
    head = json.loads(data[8 : 8 + n])
    off, models = 8 + n, []
    for size in head["sizes"]:
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "a.nvla").write_bytes(data[off : off + size])
            models.append(load(Path(d) / "a.nvla", config))
        off += size
    return CausalLM(*models, head["vocab"], head["max_len"], head["page_size"], head["n_pages"])
