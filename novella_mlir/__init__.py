"""novella-mlir: compile PyTorch models with a symbolic length for the Novella NPU."""

from .errors import ArtifactError, CompileError, InputError, NovellaError, TileFitError, UnsupportedOpError
from .pipeline import CompiledModel, compile_torch, load

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
