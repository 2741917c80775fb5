"""One torch op, outlined into its own function and lowered to linalg on tensors by torch-mlir."""

from __future__ import annotations

from torch_mlir import ir, passmanager
from torch_mlir.dialects import func

from ...errors import UnsupportedOpError

PIPELINE = (
    "builtin.module(func.func(torch-decompose-complex-ops, convert-torch-to-linalg, convert-torch-to-arith, "
    "convert-torch-to-tensor, canonicalize, linalg-fuse-elementwise-ops, canonicalize))"
)
ROUNDS = 3  # a decomposition may produce an op the next round lowers (min.other -> minimum -> linalg)
_KEEP = ("torch_c.", "func.", "torch.constant.")


def to_linalg(cx):
    """(the module holding the lowered func.func, the indices of the torch op's tensor operands: its arguments)."""
    op = cx.op
    tensors = [i for i in range(len(op.operands)) if cx.is_tensor(i)]
    module = ir.Module.create(loc=op.location)
    with op.location, ir.InsertionPoint(module.body):
        arg_types = [op.operands[i].type for i in tensors]
        fn = func.FuncOp("generic_op", (arg_types, [r.type for r in op.results]))
        fn.attributes["torch.assume_strict_symbolic_shapes"] = ir.UnitAttr.get()
        entry = fn.add_entry_block()
    mapping = {op.operands[i]: a for i, a in zip(tensors, entry.arguments)}
    with ir.InsertionPoint(entry):
        for i, v in enumerate(op.operands):
            if v not in mapping:
                _clone_constant(cx, v, i, mapping)
        copy = op.operation.clone()
        for i, v in enumerate(op.operands):
            copy.operands[i] = mapping[v]
        func.ReturnOp(list(copy.results))
    _lower(cx, module)
    return module, tensors


def _clone_constant(cx, v, i, mapping) -> None:
    owner = v.owner
    name = owner.operation.name if isinstance(owner, ir.OpView) else ""
    if not (name.startswith("torch.constant.") or name == "torch.prim.ListConstruct"):
        raise cx.error(
            f"operand #{i} ({v.type}) is computed at run time (by '{name or 'a block argument'}'); "
            "the generic path lowers an op whose non-tensor operands are constants"
        )
    for w in owner.operands:
        if w not in mapping:
            _clone_constant(cx, w, i, mapping)
    copy = owner.operation.clone()
    for j, w in enumerate(owner.operands):
        copy.operands[j] = mapping[w]
    mapping[v] = copy.results[0]


def _lower(cx, module) -> None:
    pm = passmanager.PassManager.parse(PIPELINE)
    for _ in range(ROUNDS):
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            raise _refuse(cx, f"torch-mlir's lowering failed: {str(e).splitlines()[0]}") from None
        left = _torch_ops(module)
        if not left:
            return
    raise _refuse(cx, f"torch-mlir lowers it to linalg only partly: {', '.join(sorted(set(left)))} remain")


def _torch_ops(module) -> list[str]:
    fn = module.body.operations[0]
    out = []
    for op in fn.regions[0].blocks[0].operations:
        name = op.operation.name
        if name == "torch.operator":
            name = ir.StringAttr(op.attributes["name"]).value
        if name.startswith("torch.") and not name.startswith(_KEEP):
            out.append(name)
    return out


def _refuse(cx, why: str) -> UnsupportedOpError:
    from ..lowering import source_location

    name = cx.op.operation.name
    if name == "torch.operator":
        name = ir.StringAttr(cx.op.attributes["name"]).value
    return UnsupportedOpError(
        f"{source_location(cx.op.location)}: unsupported op '{name}': the novella frontend has no lowering for "
        f"it and the generic path cannot take it: {why}. Rewrite the model to avoid it, or add a lowering for "
        f"'{name}' to the entry of the novella op it produces in novella_mlir/optable.py."
    )
