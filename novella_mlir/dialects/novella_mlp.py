"""`novella.fused_mlp`, a graph-level op of the `novella` dialect declared beside `novella.py` (which re-exports
it), where it would pass the file size limit."""

from torch_mlir import ir
from torch_mlir.dialects import ext

from . import op_verifiers as ov
from .dialect import Novella

Tensor = ir.RankedTensorType


class FusedMlpOp(Novella.Operation, name="fused_mlp"):
    """Two linears with an activation between, run as one kernel whose hidden rows never go to DRAM:
    `act(act1(input @ w1^T + b1) @ w2^T + b2) (+ residual)`. input: [..., K], w1: [H, K], b1: [H],
    w2: [N, H], b2: [N], residual and result: [..., N]; `act1` is "none", "relu" or "gelu", `act` "none" or "relu".
    Written by `--novella-fuse` (`fuse-mlp`, `kernels/linear_mlp.py`) from a linear whose only use is
    another linear's input, where the cost model predicts fewer cycles."""

    input: ext.Operand[Tensor]
    w1: ext.Operand[Tensor]
    b1: ext.Operand[Tensor]
    w2: ext.Operand[Tensor]
    b2: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    act1: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("none"))
    act: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("none"))
    residual: ext.Operand[Tensor] | None = None
    verify_invariants = ov.fused_mlp
