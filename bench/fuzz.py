"""Property-based differential fuzzing: random graphs of the supported ops, compiled once, against eager.

    .venv/bin/python bench/fuzz.py [--graphs 1000] [--seed 0]

Hypothesis draws a graph (a chain of linear / activation / layer norm /
softmax / scalar / broadcast-multiply / residual layers with random static
dims), the rank and position of the symbolic dim, and the compiled bounds;
each graph is compiled once and run at the lower bound, an odd length, a
partial last tile and the upper bound, against PyTorch eager. The property:
every compile either succeeds and matches eager at every length, or raises
a clean `NovellaError` (only allowed where the design says so: a symbolic
last dim). `test/py/test_fuzz.py` runs the same property in CI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass

import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

DIMS = (1, 3, 8, 16, 24, 33, 64)
LAYERS = ("linear", "relu", "gelu", "layernorm", "softmax", "scalar", "bmul", "residual")
RTOL = ATOL = 1e-4


@dataclass(frozen=True)
class Graph:
    """A chain of layers on an input of `shape` whose dim `dyn` is symbolic in [lo, hi]."""

    shape: tuple
    dyn: int
    lo: int
    hi: int
    layers: tuple  # (kind, param), ...

    def lengths(self) -> list[int]:
        odd = min(self.hi, max(self.lo, 7))
        partial = min(self.hi, max(self.lo, 65))
        return sorted({self.lo, odd, partial, self.hi})


@st.composite
def graphs(draw, max_layers: int = 4) -> Graph:
    rank = draw(st.sampled_from((2, 3)))
    dyn = draw(st.integers(0, rank - 2))
    features = draw(st.sampled_from(DIMS[2:]))
    shape = [draw(st.sampled_from((1, 2, 3))) for _ in range(rank - 1)] + [features]
    lo = draw(st.sampled_from((1, 2, 5)))
    hi = draw(st.sampled_from((lo, 2, 70, 130)))
    hi = max(hi, lo)
    shape[dyn] = min(max(lo, 9), hi)
    layers = []
    for _ in range(draw(st.integers(1, max_layers))):
        kind = draw(st.sampled_from(LAYERS))
        param = None
        if kind == "linear":
            param = (draw(st.sampled_from(DIMS)), draw(st.sampled_from(("none", "relu", "gelu"))))
        elif kind == "scalar":
            param = (draw(st.sampled_from(("add", "sub", "mul", "div"))), draw(st.sampled_from((0.5, -2.0, 3.0))))
        layers.append((kind, param))
    return Graph(tuple(shape), dyn, lo, hi, tuple(layers))


class Net(torch.nn.Module):
    """The eager model of a `Graph` (weights seeded from the graph, so a graph is reproducible)."""

    def __init__(self, g: Graph):
        super().__init__()
        torch.manual_seed(hash(g) % (2**31))
        self.kinds = [k for k, _ in g.layers]
        self.params = [p for _, p in g.layers]
        mods, width = [], g.shape[-1]
        for kind, param in g.layers:
            if kind == "linear":
                mods.append(torch.nn.Linear(width, param[0]))
                width = param[0]
            elif kind == "layernorm":
                mods.append(torch.nn.LayerNorm(width))
            elif kind == "residual":
                mods.append(torch.nn.Linear(width, width))
            elif kind == "bmul":
                mods.append(torch.nn.Linear(1, width))  # its bias is the broadcast vector
            else:
                mods.append(torch.nn.Identity())
        self.mods = torch.nn.ModuleList(mods)

    def forward(self, x):
        for kind, param, m in zip(self.kinds, self.params, self.mods):
            if kind == "linear":
                x = m(x)
                x = torch.relu(x) if param[1] == "relu" else torch.nn.functional.gelu(x) if param[1] == "gelu" else x
            elif kind == "relu":
                x = torch.relu(x)
            elif kind == "gelu":
                x = torch.nn.functional.gelu(x)
            elif kind == "layernorm":
                x = m(x)
            elif kind == "softmax":
                x = torch.softmax(x, dim=-1)
            elif kind == "scalar":
                op, v = param
                x = {"add": x + v, "sub": x - v, "mul": x * v, "div": x / v}[op]
            elif kind == "bmul":
                x = x * m.bias
            elif kind == "residual":
                x = x + m(x)
        return x


def check(g: Graph) -> tuple[str, str]:
    """("ok" | "refused" | "mismatch" | "crash", detail) for one graph at all its lengths."""
    from novella_mlir import NovellaError, compile_torch

    model = Net(g).eval()
    example = torch.randn(g.shape)
    try:
        npu = compile_torch(model, example, dynamic_dim=g.dyn, min_len=g.lo, max_len=g.hi)
    except NovellaError as e:
        return "refused", str(e).splitlines()[0][:160]
    except Exception as e:  # noqa: BLE001  (what the property forbids: a traceback)
        return "crash", f"compile: {type(e).__name__}: {e}"[:300]
    gen = torch.Generator().manual_seed(0)
    for length in g.lengths():
        shape = list(g.shape)
        shape[g.dyn] = length
        x = torch.randn(shape, generator=gen)
        try:
            y = npu(x)
        except Exception as e:  # noqa: BLE001
            return "crash", f"T={length}: {type(e).__name__}: {e}"[:300]
        with torch.no_grad():
            ref = model(x)
        if y.shape != ref.shape or not torch.allclose(y, ref, rtol=RTOL, atol=ATOL):
            err = (y - ref).abs().max().item() if y.shape == ref.shape else f"shape {list(y.shape)}"
            return "mismatch", f"T={length}: max err {err}"
    return "ok", ""


def run(n: int, seed_value: int = 0, verbose: bool = False) -> Counter:
    outcomes: Counter = Counter()
    failures = []

    @seed(seed_value)
    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(graphs())
    def prop(g):
        outcome, detail = check(g)
        outcomes[outcome] += 1
        outcomes["runs"] += len(g.lengths()) if outcome == "ok" else 0
        if outcome in ("mismatch", "crash"):
            failures.append((g, outcome, detail))
        if verbose or outcome != "ok":
            print(f"  {outcome:<8} {g} {detail}", flush=True)

    t0 = time.perf_counter()
    prop()
    secs = time.perf_counter() - t0
    graphs_n = sum(outcomes[k] for k in ("ok", "refused", "mismatch", "crash"))
    print(
        f"fuzz: {graphs_n} graphs (seed {seed_value}) in {secs:.0f} s: {outcomes['ok']} match eager at every length "
        f"({outcomes['runs']} runs), {outcomes['refused']} refused cleanly, {outcomes['mismatch']} mismatches, "
        f"{outcomes['crash']} tracebacks"
    )
    for g, outcome, detail in failures:
        print(f"FAIL {outcome}: {g}\n     {detail}")
    return outcomes


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    out = run(a.graphs, a.seed, a.verbose)
    sys.exit(1 if out["mismatch"] or out["crash"] else 0)
