"""bench/hostile.py's issue-20 causal-LM cases: `.nvcl` files, the runtime's box check, `generate` from
threads, decode parameters; and the numba cache in a read-only environment."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from hostile_lib import ROOT, Wrong, case

MAX_LEN, VOCAB = 24, 64
_LM: dict = {}


def _gpt2(positions=MAX_LEN):
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=positions)
    return tf.GPT2LMHeadModel(cfg).eval()


def _lm():
    if not _LM:
        from novella_mlir.causal_lm import compile_causal_lm

        lm = compile_causal_lm(_gpt2(), max_len=MAX_LEN, page_size=8, cache=False)
        d = Path(tempfile.mkdtemp())
        lm.save(d / "lm.nvcl")
        _LM.update(lm=lm, path=d / "lm.nvcl", dir=d)
    return _LM


def _refused(fn, words: str, kind=None):
    """fn() must raise a NovellaError (of `kind`) whose message holds `words`."""
    import novella_mlir

    kind = kind or novella_mlir.NovellaError
    try:
        fn()
    except kind as e:
        if words not in str(e):
            raise Wrong(f"refused without naming {words!r}: {e}") from None
        return
    raise Wrong("accepted")


def _edited(edit) -> Path:
    n = _lm()
    data = n["path"].read_bytes()
    (k,) = struct.unpack("<I", data[4:8])
    head = json.loads(data[8 : 8 + k])
    out = edit(head, data[8 + k :])
    if not isinstance(out, bytes):
        raw = json.dumps(head).encode()
        out = data[:4] + struct.pack("<I", len(raw)) + raw + data[8 + k :]
    path = n["dir"] / f"edit{len(list(n['dir'].iterdir()))}.nvcl"
    path.write_bytes(out)
    return path


def _nvcl(name, edit, words):
    def fn():
        from novella_mlir.causal_lm import load_causal_lm
        from novella_mlir.errors import ArtifactError

        _refused(lambda: load_causal_lm(_edited(edit)).generate(torch.tensor([[3] * 30]), max_new_tokens=1), words,
                 ArtifactError)  # fmt: skip

    fn.__name__ = name
    case("nvcl")(fn)


_nvcl("header_max_len_raised", lambda h, b: h.update(max_len=200), "'max_len'")
_nvcl("header_n_pages_huge", lambda h, b: h.update(n_pages=10**9), "'n_pages'")
_nvcl("header_vocab_changed", lambda h, b: h.update(vocab=VOCAB * 2), "'vocab'")
_nvcl("header_page_size_changed", lambda h, b: h.update(page_size=4), "'page_size'")
_nvcl("header_field_missing", lambda h, b: h.pop("n_pages"), "'n_pages' is missing")
_nvcl("header_not_json", lambda h, b: b"NVCL" + struct.pack("<I", 3) + b"{x]" + b, "not JSON")
_nvcl("file_truncated", lambda h, b: b"NVCL\x05", "truncated")
_nvcl("header_length_huge", lambda h, b: b"NVCL" + struct.pack("<I", 1 << 30) + b, "header length")
_nvcl("sizes_wrong", lambda h, b: h.update(sizes=[h["sizes"][0], h["sizes"][1] - 5]), "'sizes'")


@case("nvcl")
def signed_round_trip_ok():
    from novella_mlir.causal_lm import load_causal_lm

    n = _lm()
    n["lm"].save(n["dir"] / "signed.nvcl", key=b"k")
    ids = torch.tensor([[5, 6, 7]])
    if not torch.equal(load_causal_lm(n["dir"] / "signed.nvcl", key=b"k").generate(ids, 3),
                       n["lm"].generate(ids, 3)):  # fmt: skip
        raise Wrong("the loaded LM decodes differently")


@case("nvcl")
def signed_with_another_key():
    from novella_mlir.causal_lm import load_causal_lm

    n = _lm()
    n["lm"].save(n["dir"] / "signed2.nvcl", key=b"k")
    _refused(lambda: load_causal_lm(n["dir"] / "signed2.nvcl", key=b"other"), "HMAC")


@case("nvcl")
def runtime_outside_the_box():
    n = _lm()
    _refused(lambda: n["lm"].prefill.jit.instantiate([MAX_LEN + 10]), "outside every compiled program")


@case("lm-threads")
def generate_from_threads():
    lm = _lm()["lm"]
    prompts = [[torch.randint(2, VOCAB, (n,), generator=torch.Generator().manual_seed(n))] for n in (1, 3, 6, 9)]
    serial = [lm.generate(p, max_new_tokens=8)[0].tolist() for p in prompts]
    got = [None] * len(prompts)

    def work(i):
        got[i] = lm.generate(prompts[i], max_new_tokens=8)[0].tolist()

    ts = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if got != serial:
        raise Wrong(f"{sum(a != b for a, b in zip(got, serial))} of {len(serial)} threaded results differ")


def _param(name, kw, words):
    def fn():
        from novella_mlir.causal_lm import compile_causal_lm

        t0 = time.perf_counter()
        _refused(lambda: compile_causal_lm(_gpt2(32), **{"max_len": 32, "page_size": 8, "cache": False, **kw}), words)
        if time.perf_counter() - t0 > 10:
            raise Wrong(f"refused after {time.perf_counter() - t0:.0f} s of compile work")

    fn.__name__ = name
    case("lm-params")(fn)


_param("page_size_zero", dict(page_size=0), "page_size")
_param("n_pages_negative", dict(n_pages=-2), "n_pages")
_param("n_pages_huge", dict(n_pages=10**9), "n_pages")
_param("max_len_over_positions", dict(max_len=48), "position embeddings")
_param("max_len_bool", dict(max_len=True), "max_len")


def _gen(name, call, words=None):
    def fn():
        lm = _lm()["lm"]
        if words is None:
            call(lm)
        else:
            _refused(lambda: call(lm), words)

    fn.__name__ = name
    case("lm-params")(fn)


_gen("max_new_tokens_float", lambda lm: lm.generate(torch.tensor([[3, 4]]), max_new_tokens=2.5), "max_new_tokens")
_gen("prompt_2xT_in_a_list", lambda lm: lm.generate([torch.zeros(2, 3, dtype=torch.long)], 2), "1-D")
_gen("prompt_floats_in_a_list", lambda lm: lm.generate([[1, 2.5]], 2), "token ids")
_gen("eos_out_of_vocab", lambda lm: lm.generate(torch.tensor([[3]]), 2, eos_token_id=VOCAB), "eos_token_id")


@case("lm-params")
def eos_token_id_as_a_list_ok():
    lm = _lm()["lm"]
    ids = torch.tensor([[3, 4, 5]])
    free = lm.generate(ids, 6)[0].tolist()
    stop = free[5]
    got = lm.generate(ids, 6, eos_token_id=[stop])[0].tolist()
    if got != free[: free.index(stop, 3) + 1]:
        raise Wrong(f"eos_token_id=[{stop}] gave {got} (free run {free})")


@case("lm-params")
def min_len_bool():
    from novella_mlir import compile_torch

    _refused(lambda: compile_torch(torch.nn.Linear(4, 4), torch.randn(1, 3, 4), min_len=True, max_len=8), "min_len")


@case("readonly")
def numba_cache_without_a_writable_dir():
    """A copy of the simulator whose __pycache__ cannot be made, and no usable $HOME or XDG cache."""
    import shutil

    d = Path(tempfile.mkdtemp())
    shutil.copytree(ROOT / "simulator", d / "simulator", ignore=shutil.ignore_patterns("__pycache__"))
    (d / "simulator" / "__pycache__").write_text("")
    (d / "f").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(d), HOME=str(d / "f" / "h"), XDG_CACHE_HOME=str(d / "f" / "c"))
    code = "import numpy as np, simulator._fast_numba as f; print(f.__file__)"
    p = subprocess.run([sys.executable, "-B", "-c", code], cwd=d, env=env, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(p.stderr.strip().splitlines()[-1])
    if "no writable directory" not in p.stderr:
        raise Wrong("no warning about the numba cache's fallback")
