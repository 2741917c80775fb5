"""The artifact: its format (`format`), the checker every load runs (`check`), extraction from the
lowered IR (`extract`) and the persistent compile cache (`cache`). The format's names are
re-exported here: `novella_mlir.artifact.load(path)`."""

from .format import (
    FORMAT_VERSION,
    MAGIC,
    Artifact,
    InstTemplate,
    MacroMeta,
    Program,
    TensorMeta,
    TileMeta,
    combine,
    load,
)

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "Artifact",
    "InstTemplate",
    "MacroMeta",
    "Program",
    "TensorMeta",
    "TileMeta",
    "combine",
    "load",
]
