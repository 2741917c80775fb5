"""The three shipped configs (simulator/configs: edge, default, large): models compile for each
and match eager PyTorch at length 1 (or the lower bound), an odd length, a partial last tile and
the max; the Target built from each config reaches the tiler (tile sizes follow its array).

The default config is what every other test runs on; here edge (8x8, 64 KiB) and large
(32x32, 1 MiB) run the bench models and, on edge (the CI subset), the transformer-op models."""

from __future__ import annotations

import re

import models
import pytest
import test_transformer_ops as ops
import torch
from goldens import ROOT

from novella_mlir import compile_torch
from novella_mlir.machine.target import Target
from simulator import load_config

CONFIGS = {name: load_config(ROOT / "simulator" / "configs" / f"{name}.toml") for name in ("edge", "large")}
MAX_LEN = 130


def test_shipped_configs_are_what_the_issue_specifies():
    edge, large = CONFIGS["edge"], CONFIGS["large"]
    assert (edge.matrix_rows, edge.matrix_cols, edge.spad_bytes, edge.acc_bytes, edge.dram_bytes_per_cycle) == (
        8, 8, 64 << 10, 16 << 10, 8)  # fmt: skip
    assert (large.matrix_rows, large.matrix_cols, large.spad_bytes, large.acc_bytes, large.dram_bytes_per_cycle) == (
        32, 32, 1 << 20, 256 << 10, 64)  # fmt: skip


def _linear_tiles(npu) -> list[dict]:
    out = []
    for line in npu.ir("novella-tile").splitlines():
        if '"novella.linear"' in line:
            tiles = re.search(r"novella.tiles = \{([^}]*)\}", line).group(1)
            out.append({k: int(re.search(rf"\b{k} = (\d+) : i64", tiles).group(1)) for k in ("tk", "tm", "tn")})
    return out


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", ["mlp", "layer", "encoder"])
def test_bench_models_match_eager(config, name):
    spec = models.SPECS[name]
    module = spec.build(MAX_LEN)
    lo, hi = spec.bounds(MAX_LEN)
    cfg = CONFIGS[config]
    npu = compile_torch(module, spec.example(16), dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi, config=cfg)
    target = Target.from_config(cfg)
    tiles = _linear_tiles(npu)
    fused = re.findall(
        r'"novella.fused_mlp".*novella.tiles = \{hc = (\d+) : i64, tm = (\d+) : i64\}', npu.ir("novella-tile")
    )
    assert tiles or fused or name == "encoder"
    for hc, tm in fused:  # a fused MLP's hidden chunk and row block
        assert int(tm) in target.array_tiles(16) and int(hc) % cfg.matrix_cols == 0, (config, hc, tm)
    for t in tiles:
        assert t["tm"] in target.array_tiles(16), (config, t)
        assert t["tn"] % cfg.matrix_cols == 0 and t["tk"] % cfg.matrix_rows == 0, (config, t)
    for length in sorted({1, 7, 65, MAX_LEN}):
        x = spec.example(length)
        if not lo <= x.shape[spec.dynamic_dim] <= hi:
            continue
        y = npu(x)
        with torch.no_grad():
            ref = module(x)
        err = (y - ref).abs().max().item()
        assert torch.allclose(y, ref, rtol=1e-4, atol=2e-5), f"{name} on {config} at T={length}: max error {err}"


@pytest.mark.parametrize("name", list(ops.CASES))
def test_transformer_ops_match_eager_on_edge(name):
    cls, dim, _ = ops.CASES[name]
    torch.manual_seed(0)
    model = cls().eval()
    lo = 2 if name == "conv_stem" else 1
    npu = compile_torch(model, *ops._inputs(name, 37), dynamic_dim=dim, min_len=lo, max_len=MAX_LEN,
                        config=CONFIGS["edge"])  # fmt: skip
    for length in sorted({lo, 9, 33, MAX_LEN}):
        args = ops._inputs(name, length)
        y = npu(*args)
        with torch.no_grad():
            ref = model(*args)
        assert torch.allclose(y, ref, rtol=1e-4, atol=1e-4), f"{name} on edge at T={length}"
