"""The generic path: a torch op the op table has no lowering for goes through torch-mlir's own lowering.

`outline.to_linalg` copies the one op (with the constants it reads) into a function of its own and runs
torch-mlir's `torch-decompose-complex-ops` and `convert-torch-to-linalg` on it with the Python
`PassManager`; `convert.Converter` then turns the linalg-on-tensors function into novella ops in the
module being built: `linalg.generic` into `novella.generic` (its body one VEC per op) or a reduction,
data movement into the novella ops that move data, `tensor.dim` and the index arithmetic around it into
the shape mutator's affine expressions. The ops the table lowers never see this path.
"""

from __future__ import annotations

import re

from torch_mlir import ir

from .convert import Converter
from .outline import to_linalg

_RANDOM = {"rand", "randn", "rand_like", "randn_like", "randint", "randperm", "bernoulli", "uniform", "normal",
           "normal_functional", "multinomial"}  # fmt: skip


def lower(cx):
    """The novella values of the torch op `cx.op`'s results, through torch-mlir's linalg lowering."""
    name = cx.op.operation.name
    name = ir.StringAttr(cx.op.attributes["name"]).value if name == "torch.operator" else name
    if name.split(".")[2] in _RANDOM:  # ViTMAE's masking noise `torch.rand`
        raise cx.error(
            "draws random values: the NPU has no random source, and no compiled value could equal eager's draws; "
            "pass the random tensor as an input (ViTMAE: `noise=`), or remove the op (eval mode, mask_ratio=0)"
        )
    types = [str(v.type) for v in (*cx.op.operands, *cx.op.results)]
    if any(re.search(r"vtensor<\[([^\]]*,)?0(,[^\]]*)?\]", t) for t in types):
        raise cx.empty_error("an operand or the result has a 0 dim")  # torch-mlir's lowering may trap on one
    module, tensor_operands = to_linalg(cx)
    return Converter(cx).run(module.body.operations[0], [cx.operand(i) for i in tensor_operands])
