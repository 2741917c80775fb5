"""The runtime needs no MLIR (nor torch): a stored model (`runtime/executor.py`) and a stored decoder's
prefill and patched decode steps (`runtime/step.py`) run in a process where importing `mlir`,
`torch_mlir` or `torch` fails; the model's outputs match eager PyTorch, the decoder's logits and
greedy tokens transformers' eager forward."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers")

from novella_mlir import compile_torch  # noqa: E402
from novella_mlir.causal_lm import compile_causal_lm  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PS, MAX_LEN, PROMPT, STEPS = 8, 32, [3, 17, 5, 9, 11], 4

_BLOCK = r"""
import importlib.abc, json, sys
from types import SimpleNamespace

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("mlir", "torch_mlir", "torch"):
            raise ImportError(f"{name} is blocked: the runtime must not import it")

sys.meta_path.insert(0, Blocked())
"""

_RUN = (
    _BLOCK
    + r"""
import numpy as np
from novella_mlir.artifact import load
from novella_mlir.runtime.jit import Jit
from novella_mlir.runtime.kv import BlockTable, Session
from simulator.config import config_from_dict

d = sys.argv[1]
arts = {n: load(f"{d}/{n}.nvla") for n in ("prefill", "decode")}
models = {n: SimpleNamespace(artifact=a, jit=Jit(a)) for n, a in arts.items()}
sess = Session(models, config_from_dict(arts["prefill"].config, "config"), n_blocks=8)
ids = json.loads(sys.argv[2])
table = BlockTable()
sess.pool.reserve(table, len(ids))
outs, *_ = sess.run("prefill", {0: np.asarray(ids, np.float32)[None]}, (len(ids),), table)
logits = [outs[0][0, -1]]
table.length = len(ids)
for _ in range(int(sys.argv[3])):
    ids.append(int(np.argmax(logits[-1])))
    past = table.length
    sess.pool.reserve(table, past + 1)
    inputs = {0: np.array([[ids[-1]]], np.float32), 1: np.array([[past]], np.float32)}
    inputs = {k: v for k, v in inputs.items() if k not in {a for a, _ in arts["decode"].kv["inputs"]}}
    outs, *_ = sess.run("decode", inputs, (past,), table)
    logits.append(outs[0][0, -1])
    table.length = past + 1
np.save(f"{d}/logits.npy", np.stack(logits))
blocked = sorted(m for m in sys.modules if m.split(".")[0] in ("mlir", "torch_mlir", "torch"))
print(json.dumps({"ids": ids, "loaded": blocked}))
"""
)

_EXECUTE = (
    _BLOCK
    + r"""
import numpy as np
from novella_mlir.artifact import load
from novella_mlir.runtime.executor import Executor

d = sys.argv[1]
ex = Executor(load(f"{d}/mlp.nvla"))
for t in json.loads(sys.argv[2]):
    x = np.load(f"{d}/x{t}.npy")
    np.save(f"{d}/y{t}.npy", ex.run([x], check_hazards=True)[0])
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("mlir", "torch_mlir", "torch"))))
"""
)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=MAX_LEN,
                        bos_token_id=0, eos_token_id=1)  # fmt: skip
    model = tf.GPT2LMHeadModel(cfg).eval()
    lm = compile_causal_lm(model, max_len=MAX_LEN, page_size=PS, cache=False)
    d = tmp_path_factory.mktemp("stored")
    lm.prefill.artifact.save(d / "prefill.nvla")
    lm.decode.artifact.save(d / "decode.nvla")
    return model, d


def _blocked_run(script: str, *args: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_stored_model_runs_without_mlir(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, min_len=1, max_len=40, cache=False)
    npu.artifact.save(tmp_path / "mlp.nvla")
    lengths = [1, 7, 17, 40]  # 1, odd, a partial last row tile, the max
    for t in lengths:
        np.save(tmp_path / f"x{t}.npy", torch.randn(1, t, 32).numpy())
    done = _blocked_run(_EXECUTE, str(tmp_path), json.dumps(lengths))
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    for t in lengths:
        x = torch.from_numpy(np.load(tmp_path / f"x{t}.npy"))
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(np.load(tmp_path / f"y{t}.npy"), want, rtol=1e-4, atol=1e-4)


def test_stored_decoder_runs_without_mlir(stored):
    model, d = stored
    done = _blocked_run(_RUN, str(d), json.dumps(PROMPT), str(STEPS))
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["loaded"] == []
    ids = out["ids"]
    assert len(ids) == len(PROMPT) + STEPS
    with torch.no_grad():
        eager = model(torch.tensor([ids])).logits[0].numpy()
    got = np.load(d / "logits.npy")
    want = eager[len(PROMPT) - 1 : len(PROMPT) + STEPS]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert ids[len(PROMPT) :] == [int(np.argmax(x)) for x in want[:-1]]
