"""novella-mlir: compile PyTorch models with a symbolic length for the Novella NPU.

`compile_torch` and `load` import torch lazily, so tools such as
`novella-opt` start without it."""

from .errors import ArtifactError, CompileError, InputError, NovellaError, TileFitError, UnsupportedOpError

__all__ = [
    "ArtifactError",
    "CompileError",
    "CompiledModel",
    "InputError",
    "NovellaError",
    "TileFitError",
    "UnsupportedOpError",
    "compile_torch",
    "load",
]


def __getattr__(name):
    if name in ("compile_torch", "load", "CompiledModel"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(name)
