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
import sys
import threading
import time

import numpy as np
import torch
from torch.export import Dim

from .decoding import checks as lm_checks
from .decoding import files as lm_files
from .decoding.runs import GenerateRun, Step
from .decoding.sampling import TokenChooser, eos_set, model_generation_configs
from .errors import CompileError, InputError
from .pipeline import compile_torch
from .runtime.kv import BlockTable, Session


class _Prefill(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        out = self.lm(input_ids=input_ids, use_cache=True, **{_cache_param(self.lm): _full_cache()})
        return (out.logits, *_cache_tensors(_out_cache(out)))


class _Decode(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, position_ids, *kv):
        cache = _full_cache(kv)
        kw = {_cache_param(self.lm): cache}
        out = self.lm(input_ids=input_ids, position_ids=position_ids, use_cache=True, **kw)
        return (out.logits, *_cache_tensors(_out_cache(out)))


class _DecodeNoPositions(_Decode):
    """Decode of a model whose forward takes no `position_ids` (it counts positions from the cache)."""

    def forward(self, input_ids, *kv):
        out = self.lm(input_ids=input_ids, use_cache=True, **{_cache_param(self.lm): _full_cache(kv)})
        return (out.logits, *_cache_tensors(_out_cache(out)))


def _full_cache(kv=()):
    """A cache of full (never cropped) layers holding `kv` (k0, v0, k1, v1, ...): a sliding-window layer
    would crop itself to the window, a length-dependent branch torch.export narrows on. The model's
    own mask still limits attention to its window; `--novella-kv-cache` finds that window in the graph."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer in range(len(kv) // 2):
        cache.update(kv[2 * layer], kv[2 * layer + 1], layer)
    return cache


def takes_positions(model) -> bool:
    return "position_ids" in inspect.signature(model.forward).parameters


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
    missing = [p for p in ("input_ids", "use_cache") if p not in params]
    if "cache" not in params and "past_key_values" not in params:
        missing.append("cache / past_key_values")
    if missing or not hasattr(model, "config"):
        what = f"forward takes no {', '.join(missing)}" if missing else "it has no .config"
        raise InputError(
            f"{name} does not follow the causal-LM call convention ({what}); compile_causal_lm needs a "
            "transformers-style model(input_ids=, cache= (or past_key_values=), use_cache=True, and position_ids= "
            "if it takes them) "
            "returning .logits and the cache"
        )
    with torch.no_grad():
        out = model(
            input_ids=torch.zeros(1, 2, dtype=torch.long), use_cache=True, **{_cache_param(model): _full_cache()}
        )
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
    lm_checks.compile_args(model, max_len, page_size, n_pages, max_batch, fuse_attention, cache)
    model = model.eval()
    vocab, example = check_convention(model)
    pages = n_pages if n_pages is not None else max_batch * -(-max_len // page_size)
    lm_checks.pool_fits(pages, page_size, example, "n_pages" if n_pages is not None else "max_batch * pages")
    options = pass_options(page_size, fuse_attention)
    t0 = time.perf_counter()
    prefill = compile_torch(
        _Prefill(model), torch.zeros(1, 2, dtype=torch.long),
        dynamic_shapes=({1: Dim("T", min=1, max=max_len)},), config=config, pass_options=options, cache=cache,
    )  # fmt: skip
    past = Dim("past", min=1, max=max_len - 1)
    kv = tuple(torch.zeros_like(t) for t in example)
    ids, kv_spec = torch.zeros(1, 1, dtype=torch.long), tuple({2: past} for _ in kv)
    if takes_positions(model):
        args, spec, wrap = (ids, torch.full((1, 1), 2, dtype=torch.long), *kv), (None, None, kv_spec), _Decode
    else:
        args, spec, wrap = (ids, *kv), (None, kv_spec), _DecodeNoPositions
    decode = compile_torch(
        wrap(model), *args, dynamic_shapes=spec, config=config, pass_options=options, cache=cache
    )  # fmt: skip
    for name, m in (("prefill", prefill), ("decode", decode)):
        if len(m.artifact.kv.get("outputs", [])) != len(example):
            raise CompileError(
                f"the {name} program's KV cache was not recognized ({len(m.artifact.kv.get('outputs', []))} "
                f"of {len(example)} cache tensors); the model must extend its cache with cat(past, new), or write "
                "position P of a grown cache with index_copy, slice_scatter, select_scatter or index_put"
            )
    lm = CausalLM(prefill, decode, vocab, max_len, page_size, pages, time.perf_counter() - t0)
    lm.hf_config, lm.generation_config = model_generation_configs(model)
    lm.max_batch = max_batch  # the engine's bound on sequences decoded at once
    return lm


MAX_IDLE_SESSIONS = 4


class CausalLM:
    """A causal LM compiled as prefill + decode; `generate` runs greedy decoding on the simulator."""

    def __init__(self, prefill, decode, vocab: int, max_len: int, page_size: int, n_pages: int, seconds=0.0):
        self.prefill, self.decode = prefill, decode
        self.vocab, self.max_len, self.page_size, self.n_pages = vocab, max_len, page_size, n_pages
        self.compile_seconds = seconds
        self._last = threading.local()
        self._latest: GenerateRun | None = None
        self._idle: list = []  # sessions no generate call holds (each call owns one while it runs)
        self._lock = threading.Lock()
        self.hf_config = self.generation_config = None  # the model's (sampling defaults), when compiled from one
        self.batched: dict = {}  # batch size -> the batched decode program (batched.compile_batched)
        self.max_batch: int | None = None

    def fresh(self, n_pages: int | None = None) -> CausalLM:
        """A CausalLM over the same compiled programs and settings, with its own sessions, runs and batched
        programs; `n_pages` gives it a different page pool."""
        lm = CausalLM(self.prefill, self.decode, self.vocab, self.max_len, self.page_size,
                      self.n_pages if n_pages is None else n_pages, self.compile_seconds)  # fmt: skip
        lm.hf_config, lm.generation_config, lm.max_batch = self.hf_config, self.generation_config, self.max_batch
        return lm

    @property
    def nbytes(self) -> int:
        """MacroMeta + TileMeta bytes of both programs."""
        return self.prefill.artifact.nbytes + self.decode.artifact.nbytes

    @property
    def last_run(self) -> GenerateRun | None:
        """The calling thread's last `generate` run (else the last one of any thread)."""
        return getattr(self._last, "run", None) or self._latest

    def session(self, check_hazards: bool = True) -> Session:
        """An idle NPU session (weights written once; its DRAM holds the cache between steps): the one the
        next serial `generate` with these `check_hazards` runs on."""
        with self._lock:
            for sess in self._idle:
                if sess.sim.check_hazards == check_hazards:
                    return sess
        sess = self._new_session(check_hazards)
        with self._lock:
            self._idle.append(sess)
        return sess

    def _new_session(self, check_hazards: bool) -> Session:
        models = {"prefill": self.prefill, "decode": self.decode}
        models.update({f"batch{n}": m for n, m in self.batched.items()})  # batched.py
        return Session(models, self.prefill.config, self.n_pages, check_hazards=check_hazards)

    def _acquire(self, check_hazards: bool) -> Session:
        """A session this call owns: an idle one, else a new one (a concurrent call never shares it)."""
        with self._lock:
            for i, sess in enumerate(self._idle):
                if sess.sim.check_hazards == check_hazards:
                    return self._idle.pop(i)
        return self._new_session(check_hazards)

    def _release(self, sess: Session) -> None:
        with self._lock:
            fresh = set(sess.models) >= {f"batch{n}" for n in self.batched}
            if sess not in self._idle and len(self._idle) < MAX_IDLE_SESSIONS and fresh:
                self._idle.insert(0, sess)

    def _forget_sessions(self) -> None:
        """Idle sessions are dropped (the next one holds the programs added since, e.g. batched ones)."""
        with self._lock:
            self._idle.clear()

    def _publish(self, run: GenerateRun) -> None:
        self._last.run = self._latest = run

    def generate(
        self, prompts, max_new_tokens: int, eos_token_id: int | list | None = None, check_hazards: bool = True,
        keep_words: bool = False, *, do_sample: bool = False, temperature: float | None = None,
        top_k: int | None = None, top_p: float | None = None, repetition_penalty: float | None = None,
        progress: bool | None = None, **options,
    ):  # fmt: skip
        """Greedy decoding, or sampling with `do_sample=True`. A [1, T] LongTensor gives [1, T + N]; a list
        of 1-D prompts (tensors or lists of ints) gives a list, the sequences decoded together on one page
        pool. Stops early at `eos_token_id` (an id or a list of ids) only when given. The next token is
        chosen on the host by transformers' own generation config and logits processors (`decoding/sampling.py`):
        `temperature`, `top_k`, `top_p`, `repetition_penalty` and the other `GenerationConfig` options in
        `options`, over the model's `generation_config`; with the same `torch.manual_seed`, the tokens of
        `hf.generate(do_sample=True)`. `keep_words`: each Step keeps a copy of the instruction words it ran.
        `progress`: a tqdm bar of the generated tokens with tokens per second (default: on a terminal;
        NOVELLA_PROGRESS=0/1 overrides); `last_run.tokens_per_second` either way. Thread-safe: each call
        runs on a session of its own."""
        single, seqs, eos_token_id = lm_checks.generate_args(
            prompts, max_new_tokens, eos_token_id, self.vocab, check_hazards, keep_words
        )
        given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "repetition_penalty": repetition_penalty}
        options.update({k: v for k, v in given.items() if v is not None}, do_sample=do_sample)
        stop = eos_set(eos_token_id)
        choose = TokenChooser(self.hf_config, self.generation_config, sorted(stop) or None, options)
        for i, s in enumerate(seqs):
            if len(s) > self.max_len:
                raise InputError(f"prompt #{i} has {len(s)} tokens, more than max_len={self.max_len}")
            if len(s) + max_new_tokens > self.max_len:
                raise InputError(
                    f"prompt #{i} has {len(s)} tokens; generating {max_new_tokens} more would pass "
                    f"max_len={self.max_len}; lower max_new_tokens or compile with a larger max_len"
                )
        bar = _token_bar(len(seqs) * max_new_tokens, progress)
        if not single:
            with bar:
                return self._generate_batch(seqs, max_new_tokens, eos_token_id, check_hazards, choose, keep_words, bar)
        sess = self._acquire(check_hazards)
        run = GenerateRun(kv_bytes_max_len=len(seqs) * self.max_len * sess.block_elems // self.page_size * 4)
        run.keep_words = keep_words
        self._publish(run)
        tables = [BlockTable() for _ in seqs]
        t0 = time.perf_counter()
        try:
            self._decode_all(sess, seqs, tables, max_new_tokens, (stop, choose, bar), run)
        finally:
            bar.close()
            for t in tables:
                sess.pool.release(t)
            self._release(sess)
        run.seconds = time.perf_counter() - t0
        outs = [torch.tensor(s, dtype=torch.long) for s in seqs]
        return outs[0][None, :] if single else outs

    def _generate_batch(self, seqs, max_new_tokens, eos_token_id, check_hazards, choose, keep_words, bar) -> list:
        """A list of prompts runs on the continuous-batching engine (`decoding/engine.py`)."""
        from .decoding.engine import generate

        return generate(
            self, seqs, max_new_tokens, eos_token_id, check_hazards, choose=choose, keep_words=keep_words, bar=bar
        )

    def _decode_all(self, sess, seqs, tables, n_new, rule, run) -> None:
        stop, choose, bar = rule

        def emit(i, logits):
            run.logits[i].append(logits)
            seqs[i].append(choose(seqs[i], prompt_lens[i], logits))
            run.tokens += 1
            bar.update(1)

        prompt_lens = [len(s) for s in seqs]
        active = []
        for i, (ids, table) in enumerate(zip(seqs, tables)):
            logits = self._prefill(sess, i, ids, table, run)
            run.logits.append([])
            if n_new:
                emit(i, logits)
                active.append(i)
        for _ in range(n_new - 1):
            active = [i for i in active if seqs[i][-1] not in stop]
            for i in active:
                logits = self._step(sess, i, seqs[i], tables[i], run)
                emit(i, logits)
        for i in range(len(seqs)):
            run.logits[i] = np.stack(run.logits[i]) if run.logits[i] else np.zeros((0, self.vocab), np.float32)

    def _prefill(self, sess, i, ids, table, run):
        sess.pool.reserve(table, len(ids))
        x = np.asarray(ids, np.float32)[None, :]
        outs, *res = sess.run("prefill", {0: x}, (len(ids),), table)
        table.length = len(ids)
        self._drop_out_of_window(sess, table)
        self._record(run, sess, "prefill", i, len(ids), *res)
        return outs[0][0, -1]

    def _step(self, sess, i, seq, table, run):
        past = table.length
        sess.pool.reserve(table, past + 1)
        outs, *res = sess.run("decode", self.decode_inputs(seq[-1], past), (past,), table)
        table.length = past + 1
        self._drop_out_of_window(sess, table)
        self._record(run, sess, "decode", i, past, *res)
        return outs[0][0, -1]

    def decode_inputs(self, token: int, past: int) -> dict:
        """The decode program's non-cache inputs: the token, and the position if the forward takes one."""
        inputs = {0: np.array([[token]], np.float32)}
        if 1 not in {arg for arg, _ in self.decode.artifact.kv["inputs"]}:  # input 1: the position, if taken
            inputs[1] = np.array([[past]], np.float32)
        return inputs

    def _drop_out_of_window(self, sess, table) -> None:
        """With a sliding window of W (`kv.window`: every decode read is windowed), the next step, past
        P = table.length, reads positions >= P + 1 - W: the pages wholly before them are freed."""
        w = self.decode.artifact.kv.get("window")
        if w is not None:
            sess.pool.drop_before(table, (table.length + 1 - w) // self.page_size)

    def _record(self, run, sess, kind, i, position, stats, jit_s, sim_s, words, new) -> None:
        kv = sess.pool.in_use * sess.kv_bytes_per_block
        run.kv_bytes_peak = max(run.kv_bytes_peak, kv)
        run.steps.append(
            Step(kind, i, position, stats.cycles, stats.dma_bytes_loaded + stats.dma_bytes_stored, jit_s, sim_s,
                 sess.pool.in_use, kv, stats.instructions, new, words.copy() if run.keep_words else None)
        )  # fmt: skip

    def save(self, path, key: bytes | str | None = None) -> None:
        """Both programs in one file (`decoding/files.py`); with `key`, signed (HMAC-SHA256) for `load_causal_lm`."""
        lm_files.save(self, path, key=key)


def load_causal_lm(path, config=None, key: bytes | str | None = None) -> CausalLM:
    """Reads a file written by `CausalLM.save`: every header field checked against its programs (an
    ArtifactError naming the field), and with `key` its signature."""
    return CausalLM(*lm_files.load(path, config, key=key))


def _token_bar(total: int, progress: bool | None):
    from tqdm import tqdm

    from simulator.first_build import enabled

    on = enabled() if progress is None else progress
    return tqdm(total=total, desc="generate", unit="tok", file=sys.stderr, disable=not on)
