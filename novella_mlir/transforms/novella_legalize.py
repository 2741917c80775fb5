"""--novella-legalize: rewrites the tensor ops into the forms the NPU kernels run.

Patterns (greedy, registered from Python):
  * `relu`/`gelu` of a single-use `linear` folds into the linear's epilogue;
  * the patterns listed in `LEGALIZE_PATTERNS` of `novella_mlir/optable.py`;
  * with `fuse-attention=1` (the default) the `FUSION_PATTERNS` there: matmul -> softmax -> matmul
    becomes one `novella.flash_attention` (option 0 keeps the three kernels, e.g. for a paged KV cache);
  * with `fuse-residual=1` / `fuse-norm=1` (the defaults) the `EPILOGUE_PATTERNS` there: `add(linear, x)`
    and `layer_norm(linear)` become one `novella.fused_linear` whose epilogue adds x / normalizes the
    rows before the one STORE (the norm when whole rows fit and the cost model predicts a gain);
then every tensor op must have a kernel, or the pass fails naming the op."""

from __future__ import annotations

from torch_mlir import ir, rewrite

from ..dialects.novella import GeluOp, LinearOp, ReluOp
from ..machine.target import Target
from ..optable import EPILOGUE_PATTERNS, get_kernel, legalize_patterns
from .common import PassError, body_ops, check_symbols, fold_fixed_sizes, functions, is_tensor_op, require_stage

OPTIONS = {
    "fuse-attention": (int, 1, "fuse matmul -> softmax -> matmul into novella.flash_attention", (0, 1)),
    "fuse-residual": (int, 1, "fuse add(linear, x) into the linear's epilogue (novella.fused_linear)", (0, 1)),
    "fuse-norm": (int, 1, "fuse layer_norm(linear) into the linear's epilogue when whole rows fit and pay", (0, 1)),
}
NO_KERNEL_NEEDED = ("novella.reshape", "func.return")


def _fuse_activation(act: str):
    def pattern(op, rewriter):
        producer = op.operands[0].owner
        if not isinstance(producer, ir.OpView) or producer.operation.name != "novella.linear":
            return True
        if ir.StringAttr(producer.attributes["act"]).value != "none":
            return True
        if len(list(producer.results[0].uses)) != 1:
            return True
        with rewriter.ip, op.location:
            fused = LinearOp(*producer.operands, op.results[0].type, act=ir.StringAttr.get(act), loc=producer.location)
        rewriter.replace_op(op, fused.operation)
        rewriter.erase_op(producer)
        return False

    return pattern


def run(module_op, options, config) -> None:
    symbols = check_symbols(module_op)
    require_stage(module_op, "novella-legalize", None, "novella-shape-infer")
    patterns = rewrite.RewritePatternSet()
    patterns.add(ReluOp, _fuse_activation("relu"))
    patterns.add(GeluOp, _fuse_activation("gelu"))
    for root, fn in legalize_patterns(fusion=bool(options.get("fuse-attention", 1))):
        patterns.add(root, fn)
    target = Target.from_config(config)
    for name, (root, factory) in EPILOGUE_PATTERNS.items():
        if options.get(name, 1):
            patterns.add(root, factory(target))
    rewrite.apply_patterns_and_fold_greedily(module_op, patterns.freeze())
    fold_fixed_sizes(module_op, symbols)
    for fn in functions(module_op):
        for op in body_ops(fn):
            name = op.operation.name
            if is_tensor_op(op) and name not in NO_KERNEL_NEEDED and get_kernel(name) is None:
                raise PassError(op, "has no NPU kernel; legalize it into supported ops first")
