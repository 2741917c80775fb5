"""cumsum (`novella.scan`) on the simulator: cycles against the compulsory roofline, side by side in one run.

    .venv/bin/python bench/scan.py

Each case is compiled once for T in [1, 2048] and run at a short and the longest length. The roofline of
a scan is its DRAM traffic (input + output fp32 over the DRAM bandwidth; it does no MACs); moved bytes are
printed beside it.
"""

from __future__ import annotations

import torch

from novella_mlir import compile_torch

CASES = (  # (name, example shape, the dim that is T, the scanned dim)
    ("positions [1, T], dim 1", (1, 16), 1, 1),
    ("rows [1, T, 64], dim 1", (1, 16, 64), 1, 1),
    ("rows [4, T, 8], dim 1", (4, 16, 8), 1, 1),
    ("columns [4, T, 64], dim 2", (4, 16, 64), 1, 2),
    ("columns [T, 4], dim 1", (16, 4), 0, 1),
)
LENGTHS = (37, 2048)


class Cumsum(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.cumsum(self.dim)


def main() -> None:
    print(f"{'case':>26} {'T':>5} {'cycles':>9} {'roofline':>9} {'ratio':>6} {'moved B':>10} {'max err':>9}")
    for name, shape, dyn, dim in CASES:
        model = Cumsum(dim)
        npu = compile_torch(model, torch.randn(shape), dynamic_dim=dyn, min_len=1, max_len=2048, cache=False)
        for n in LENGTHS:
            s = list(shape)
            s[dyn] = n
            x = torch.randn(s)
            y = npu(x)
            st = npu.last_run.stats
            roof = 2 * x.numel() * 4 / st.dram_bytes_per_cycle
            moved = st.dma_bytes_loaded + st.dma_bytes_stored
            err = (y - model(x)).abs().max().item()
            print(
                f"{name:>26} {n:>5} {st.cycles:>9,} {int(roof):>9,} {st.cycles / roof:>6.2f} {moved:>10,} {err:>9.1e}"
            )


if __name__ == "__main__":
    main()
