"""What verifying the lower IR costs a compile, side by side in one run.

    .venv/bin/python bench/verify_cost.py [--model encoder] [--max-len 1500] [--repeat 5]

Compiles `--model` (bench/models.py) once, then, for each backend stage's IR (parsed anew), times
MLIR's verifier (which runs every op's verifier: the graph ops' shape checks and the declared
fields of the macro, tile and instruction ops, `dialects/novella_lower.py`) and the check of the
`novella.*` annotations (`dialects/discardable.py`) that `transforms/registry.py` runs after every
pass, against the compile's own time (medians of `--repeat`)."""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models import compile_model  # noqa: E402
from torch_mlir import ir  # noqa: E402

from novella_mlir.dialects import discardable  # noqa: E402
from novella_mlir.dialects.context import make_context  # noqa: E402
from novella_mlir.transforms.registry import BACKEND_PIPELINE  # noqa: E402


def _median(fn, repeat: int) -> tuple[float, float]:
    """The median time of `fn` over `repeat` runs after a first one (the verifiers' memos then hold
    this stage's verdicts, as they hold the equal layers' within one stage of a compile)."""
    out = []
    for _ in range(repeat + 1):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out[0], statistics.median(out[1:])


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="encoder")
    p.add_argument("--max-len", type=int, default=1500)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    t = time.perf_counter()
    _, _, npu = compile_model(args.model, args.max_len, buckets=False)
    compile_s = time.perf_counter() - t
    ctx = make_context()
    print(f"{args.model} (T <= {args.max_len}, one program): compile {compile_s:.2f} s")
    print(f"{'stage':<22} {'ops':>7} {'verify ms (first, again)':>26} {'annotations ms (first, again)':>31}")
    verify_total = check_total = 0.0
    for stage in BACKEND_PIPELINE:
        if stage not in npu.stages.texts:
            continue
        with ctx:
            module = ir.Module.parse(npu.stages.texts[stage])
            n = sum(1 for _ in _ops(module.operation))
            v = _median(module.operation.verify, args.repeat)
            c = _median(functools.partial(discardable.check, module.operation), args.repeat)
        verify_total, check_total = verify_total + v[0], check_total + c[0]
        print(f"{stage:<22} {n:>7} {v[0] * 1e3:>15.1f} {v[1] * 1e3:>10.1f} {c[0] * 1e3:>20.1f} {c[1] * 1e3:>10.1f}")
    print(f"all stages, first runs: verify {verify_total:.3f} s, annotations {check_total:.3f} s = "
          f"{(verify_total + check_total) / compile_s:.1%} of the compile")  # fmt: skip


def _ops(op):
    for region in op.regions:
        for block in region.blocks:
            for o in block.operations:
                yield o
                yield from _ops(o)


if __name__ == "__main__":
    main()
