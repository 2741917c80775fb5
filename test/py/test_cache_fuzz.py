"""Fuzz of the compile cache's key (issue 20): models that compute different things never share an entry;
models that differ only in how their Python was written do.

Each model is a class made with `exec` from generated source (no file, as from `python -c` or a notebook),
with knobs read the many ways a forward reads Python state: an attribute of one of many types (float,
int, numpy scalar, tensor, Enum, dataclass, Namespace, dict), a function attribute (lambdas from one
factory, a functools.partial), a bool flag, a default argument, a forward hook, a buffer, a class
attribute changed after the class was made, a global, and the weights. The key is the one
`compile_torch` looks its entries up under (`cache.lookup_key`: its first export, no compile)."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from novella_mlir import compile_torch
from novella_mlir.artifact import cache


class Mode(enum.Enum):
    LOW = 1
    MID = 2
    HIGH = 3
    TOP = 4


@dataclasses.dataclass
class Cfg:
    gain: float


def _act(fn):
    return lambda t: fn(t)


ACTS = [_act(torch.relu), _act(torch.tanh), _act(torch.sigmoid), functools.partial(torch.clamp, min=-0.25),
        functools.partial(torch.clamp, min=0.5)]  # fmt: skip

# how the gain `g` (1..4) is held, and how forward reads it
HOLDERS = {
    "float": (float, "self.g"),
    "int": (int, "self.g"),
    "numpy": (np.float32, "self.g"),
    "tensor": (lambda v: torch.tensor(float(v)), "self.g"),
    "enum": (lambda v: Mode(v), "self.g.value"),
    "dataclass": (lambda v: Cfg(float(v)), "self.g.gain"),
    "namespace": (lambda v: argparse.Namespace(gain=float(v)), "self.g.gain"),
    "dict": (lambda v: {"gain": float(v)}, "self.g['gain']"),
}

DEFAULT = dict(holder="float", gain=2, act=1, flag=False, alpha=0.5, hook=0.0, buf=0.25, cls_k=1.0, offset=0.0,
               seed=0)  # fmt: skip
VALUES = {
    "gain": st.integers(1, 4),
    "act": st.integers(0, len(ACTS) - 1),
    "flag": st.booleans(),
    "alpha": st.sampled_from([0.5, -1.0, 2.0, 0.125]),
    "hook": st.sampled_from([0.0, 1.0, -3.0]),
    "buf": st.sampled_from([0.25, -0.75, 1.5]),
    "cls_k": st.sampled_from([1.0, 2.0, -2.0]),
    "offset": st.sampled_from([0.0, 0.5, 4.0]),
    "seed": st.integers(0, 3),
}

TEMPLATE = """
import torch

class {cls}(torch.nn.Module):
    K = 0.0

    def __init__(self, g, act, flag, buf, seed):
        super().__init__()
{inits}

    def forward(self, x, alpha={alpha}):
        {a} = self.lin(x){comment}
        {b} = self.act({a}) * {access} + alpha
        if self.flag:
            {b} = {b}.flip(-1)
        return {b} + self.buf + type(self).K + OFFSET
"""

INITS = ["self.g = g", "self.act = act", "self.flag = flag", "self.register_buffer('buf', torch.full((8,), buf))"]


@dataclasses.dataclass
class Writing:
    order: list
    names: tuple = ("y", "z")
    comment: str = ""
    cls: str = "Net"


def build(knobs: dict, w: Writing) -> torch.nn.Module:
    make, access = HOLDERS[knobs["holder"]]
    inits = [INITS[i] for i in w.order]
    inits.insert(0, "torch.manual_seed(seed)\n        self.lin = torch.nn.Linear(8, 8)")
    src = TEMPLATE.format(
        cls=w.cls, inits="\n".join("        " + line for line in inits), alpha=knobs["alpha"], a=w.names[0],
        b=w.names[1], access=access, comment=w.comment,
    )  # fmt: skip
    ns = {"OFFSET": knobs["offset"]}
    exec(compile(src, "<generated>", "exec"), ns)
    cls = ns[w.cls]
    cls.K = knobs["cls_k"]
    m = cls(make(knobs["gain"]), ACTS[knobs["act"]], knobs["flag"], knobs["buf"], knobs["seed"]).eval()
    if knobs["hook"]:
        m.lin.register_forward_hook(lambda mod, inp, out, h=knobs["hook"]: out + h)
    return m


X = torch.randn(1, 5, 8)


def key(m) -> str:
    # from T = 2: one export per key (a range from 1 also traces T = 1, tested in test_compile_cache.py)
    return cache.lookup_key(compile_torch, m, X, dynamic_dim=1, min_len=2, max_len=16)


def out(m):
    with torch.no_grad():
        return m(X)


PLAIN = Writing(order=[0, 1, 2, 3])
FUZZ = settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the hypothesis profile (conftest.py)


@pytest.fixture(autouse=True)
def _cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("NOVELLA_CACHE_DIR", str(tmp_path))


@st.composite
def differing(draw):
    """Two knob sets that differ in one knob (the holder's type with the gain, or any other knob)."""
    which = draw(st.sampled_from(["holder", *VALUES]))
    a, b = dict(DEFAULT), dict(DEFAULT)
    if which == "holder":
        a["holder"] = b["holder"] = draw(st.sampled_from(sorted(HOLDERS)))
        which = "gain"
    a[which] = draw(VALUES[which])
    b[which] = draw(VALUES[which].filter(lambda v: v != a[which]))
    return a, b


@FUZZ
@given(differing())
def test_models_that_compute_differently_never_share_an_entry(pair):
    a, b = build(pair[0], PLAIN), build(pair[1], PLAIN)
    assume(not torch.allclose(out(a), out(b)))  # e.g. relu and clamp(min=0.5) agree nowhere? then skip
    assert key(a) != key(b), pair


@st.composite
def writings(draw):
    knobs = dict(DEFAULT, holder=draw(st.sampled_from(sorted(HOLDERS))))
    knobs.update({k: draw(v) for k, v in VALUES.items()})
    ident = st.sampled_from(["y", "z", "h", "hidden", "tmp", "out_", "v1"])
    names = draw(st.tuples(ident, ident).filter(lambda t: t[0] != t[1]))
    w = Writing(draw(st.permutations(range(4))), names, draw(st.sampled_from(["", "  # project", "\n        # x @ W.T + b: a line that moves the rest"])),
                draw(st.sampled_from(["Net", "Model", "Other"])))  # fmt: skip
    assume(w != PLAIN)
    return knobs, w


@FUZZ
@given(writings())
def test_models_written_differently_share_an_entry(case):
    knobs, w = case
    a, b = build(knobs, PLAIN), build(knobs, w)
    assert torch.equal(out(a), out(b))
    assert key(a) == key(b), (knobs, w)
