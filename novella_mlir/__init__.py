"""novella-mlir: compile PyTorch models with a symbolic length for the Novella NPU.

`compile_torch`, `compile_causal_lm` and the loaders import torch lazily, so tools such as
`novella-opt` start without it."""

__version__ = "0.1.0"

from .errors import ArtifactError, CompileError, InputError, NovellaError, TileFitError, UnsupportedOpError

__all__ = [
    "ArtifactError",
    "CompileError",
    "CompiledModel",
    "InputError",
    "NovellaError",
    "TileFitError",
    "UnsupportedOpError",
    "compile_causal_lm",
    "compile_torch",
    "load",
    "load_causal_lm",
]


def __getattr__(name):
    if name == "compile_torch":
        from . import pipeline

        return pipeline.compile_torch
    if name in ("load", "CompiledModel"):
        from . import compiled

        return getattr(compiled, name)
    if name in ("compile_causal_lm", "load_causal_lm"):
        from . import causal_lm

        return getattr(causal_lm, name)
    raise AttributeError(name)
