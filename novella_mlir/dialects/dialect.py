"""The `novella` dialect object, defined in Python on IRDL (`torch_mlir.dialects.ext`).

Its ops are declared in `novella.py` (graph level, with the attention and KV-cache ops in
`novella_attention.py`) and `novella_lower.py` (tile, macro and instruction levels); `novella.load` registers them all, once per context."""

from torch_mlir.dialects import ext


class Novella(ext.Dialect, name="novella"):
    """The Novella NPU dialect."""
