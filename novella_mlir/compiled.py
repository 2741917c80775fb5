"""`CompiledModel`: a compiled artifact with its simulator executor, called like the nn.Module; `load`.

`stages` is the compile's `pipeline.Stages` (the IR after each stage and its seconds), None for a model
loaded from a file."""

from __future__ import annotations

import torch

from simulator import load_config

from . import artifact as art_mod
from .errors import InputError
from .runtime.executor import Executor, check_count


class CompiledModel:
    """A model compiled once for every length in bounds; call it like the nn.Module."""

    def __init__(self, artifact, config=None, stages=None):
        self.artifact = artifact
        self.config = config or load_config()
        self.stages = stages
        self.executor = Executor(artifact, self.config)

    def __repr__(self) -> str:
        return f"<CompiledModel {self.artifact!r}>"

    def __call__(self, *inputs, **options):
        """Runs the model on the simulator like the nn.Module: the outputs of `run` (same options)."""
        return self.run(*inputs, **options)[0]

    def run(
        self, *inputs, trace: bool = False, check_hazards: bool = True, progress: bool | None = None, cast: bool = False
    ):
        """(outputs, RunResult) of one call: thread-safe access to the run's program, stats and trace.

        Inputs must have the dtypes the model was compiled with (as eager requires) unless `cast=True`;
        `check_hazards=False` skips the race checker (same outputs and cycles, faster); `progress` shows
        a tqdm bar (default: on a terminal, for long programs); `last_run` then holds this thread's run."""
        metas = self.artifact.programs[0].inputs
        check_count(inputs, metas)  # before the zip below, which would drop extra inputs
        arrays = [_to_numpy(x, i, m.dtype, cast) for i, (x, m) in enumerate(zip(inputs, metas))]
        outs, run = self.executor.run_with_result(
            arrays, trace=trace, check_hazards=check_hazards, progress=progress, cast=cast
        )
        outs = [torch.from_numpy(o) for o in outs]
        return (outs[0] if len(outs) == 1 else tuple(outs)), run

    @property
    def last_run(self):
        """The RunResult of the calling thread's last call (per thread; see `run` for the result itself)."""
        return self.executor.last_run

    @property
    def jit(self):
        return self.executor.jit

    def ir(self, stage: str, at=None) -> str:
        """IR text after `stage` ("torch", "novella", or a pass flag such as "novella-tile"): of the generic
        program, or with `at` (symbol values) of the program that runs them (a shape bucket's, from
        `novella-buckets` on)."""
        name = stage
        if at is not None and self.stages and len(self.artifact.programs) > 1:
            prog = self.artifact.programs[self.artifact.pick(at)]
            box = ", ".join(f"{s[0]} in [{lo}, {hi}]" for s, (lo, hi) in zip(self.artifact.symbols, prog.ranges))
            name = f"{stage} @ {box}" if stage in _per_program() else stage
        if not self.stages or name not in self.stages.texts:
            known = ", ".join(self.stages.texts) if self.stages else "none (loaded from a file)"
            raise KeyError(f"no IR for stage '{name}'; stages: {known}")
        return self.stages.texts[name]

    def summary(self) -> dict:
        a = self.artifact
        return {
            "symbols": a.symbols,
            "macro_meta_bytes": a.macro_nbytes,
            "tile_meta_bytes": a.tile_nbytes,
            "weight_bytes": a.weight_nbytes,
            "programs": [
                {
                    "ranges": p.ranges,
                    "reason": p.reason,
                    "macro_meta_bytes": mb,
                    "tile_meta_bytes": tb,
                    "macros": len(p.macros),
                    "tiles": len(p.tiles),
                }
                for p, (mb, tb) in ((p, a.program_nbytes(i)) for i, p in enumerate(a.programs))
            ],
            "stage_seconds": self.stages.seconds if self.stages else {},
        }

    def save(self, path, key: bytes | str | None = None) -> None:
        """Saves the artifact; with `key` it is signed (HMAC-SHA256) for `load(path, key=key)`."""
        self.artifact.save(path, key=key)


def _per_program() -> tuple:
    """The passes run once per program (from --novella-buckets on), whose IR is kept per program (a model with
    stages was compiled in this process, so the passes are loaded; a loaded model needs no MLIR)."""
    from .transforms.registry import BACKEND_PIPELINE

    return BACKEND_PIPELINE[BACKEND_PIPELINE.index("novella-buckets") + 1 :]


def _to_numpy(x, i: int, want: str, cast: bool):
    """A torch tensor as a numpy array, refusing what has no dense CPU data; other values pass through
    (the executor checks dtypes against the compiled ones, `want`)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.layout != torch.strided:
        raise InputError(f"input #{i} is a {x.layout} tensor; pass a dense tensor (x.to_dense())")
    if x.device.type == "meta":
        raise InputError(f"input #{i} is a meta tensor, which has no data")
    x = x.detach().cpu().resolve_conj().resolve_neg()
    if x.dtype == torch.bfloat16:  # numpy has no bfloat16
        if not cast:
            raise InputError(
                f"input #{i} has dtype torch.bfloat16, the model was compiled for torch.{want}; "
                "convert it (x.float()) or pass cast=True"
            )
        x = x.float()
    return x.numpy()


def load(path, config=None, key: bytes | str | None = None) -> CompiledModel:
    """Loads a saved artifact as a runnable model (validated; authenticated too when `key` is given)."""
    config = config or load_config()
    return CompiledModel(art_mod.load(path, config, key=key), config)
