"""User-facing errors. Each one names the op, location or length at fault and says what to do."""

from __future__ import annotations


class NovellaError(ValueError):
    """Base class: a problem with the user's model, IR, config or input."""


class UnsupportedOpError(NovellaError):
    """The frontend has no lowering for an aten op."""


class UnsupportedDtypeError(NovellaError):
    """A value has a dtype the NPU cannot hold (a float that is not float32)."""


class CompileError(NovellaError):
    """A pass rejected the IR (with an MLIR diagnostic)."""


class TileFitError(NovellaError):
    """The hardware config cannot hold the smallest tile of an op."""


class InputError(NovellaError):
    """A runtime input does not match the compiled signature or bounds."""


class ArtifactError(NovellaError):
    """An artifact file is corrupted, truncated, or from another version or config."""
