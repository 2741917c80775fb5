"""torch.export failures as one sentence that names the construct and the user's source line.

torch reports these with its internal repr (`Could not guard on
data-dependent expression Eq(u0, 1)`, `Constraints violated
(L['x'].size()[1])`, "narrowed dim"). The functions here turn them into
what to look at and what to do:

* `check_dtypes(module)`: parameters must be float32 (or float64, demoted), buffers real;
* `export_error(exc, module, dim, lo, hi)`: the message for an exception of `torch.export.export`;
* `fixing_call(run)`: the torch call and user line after which a symbolic size became a constant;
* `unbacked(prog)`: the message for an exported graph with data-dependent sizes (`nonzero`), else None;
* `quiet()`: silences torch's noise during export (the `copyreg` FutureWarning,
  the fake-tensor traceback it logs before raising, the graph dumps).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import re
import traceback
import warnings
from pathlib import Path

import sympy
import torch
from torch.overrides import TorchFunctionMode

from ..errors import NovellaError

_NOISY_LOGGERS = (
    "torch._subclasses.fake_tensor",
    "torch.fx.experimental.symbolic_shapes",
    "torch.fx.experimental.recording",
    "torch._export",
    "torch.export",
    "torch._dynamo",
)
_RECURRENT = (torch.nn.RNNBase,)
_TORCH_DIR = str(Path(torch.__file__).parent)
_OURS = str(Path(__file__).resolve().parents[1])
_STDLIB = str(Path(os.__file__).parent)


@contextlib.contextmanager
def quiet():
    """torch.export without its deprecation warning, logged tracebacks and graph dumps
    (which torch prints to stderr before raising). NOVELLA_DEBUG=1 keeps them."""
    if os.environ.get("NOVELLA_DEBUG"):
        yield
        return
    loggers = [logging.getLogger(n) for n in _NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def _is_user(filename: str) -> bool:
    return not (
        filename.startswith((_TORCH_DIR, _OURS, "<")) or "site-packages" in filename or "/lib/python3" in filename
    )


def _where(filename: str, line: int, code: str | None) -> str:
    return f"{filename}:{line}" + (f" (`{code.strip()}`)" if code and code.strip() else "")


def user_line(exc: BaseException) -> str | None:
    """`file:line (`code`)` of the innermost user frame that raised `exc`."""
    frames = list(getattr(exc, "real_stack", None) or []) + list(traceback.extract_tb(exc.__traceback__))
    for f in reversed(frames):
        if _is_user(f.filename):
            return _where(f.filename, f.lineno, f.line)
    m = re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s+(.*)', str(exc))
    user = [x for x in m if _is_user(x[0])]
    return _where(user[-1][0], int(user[-1][1]), user[-1][2]) if user else None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _SizeWatch(TorchFunctionMode):
    """Notes the first torch call made from the user's code after which a symbolic size of one of its tensor
    arguments is a constant (a kernel that read it as an int), with the user's line."""

    culprit: str | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sizes = [] if self.culprit else _symbolic_sizes((args, kwargs))
        out = func(*args, **kwargs)
        if any(_fixed(env, s) for env, s in sizes):
            line = next((_where(f.filename, f.lineno, f.line) for f in reversed(traceback.extract_stack())
                         if _is_user(f.filename)), None)  # fmt: skip
            self.culprit = f"`{_torch_name(func)}`" + (f" at {line}" if line else "")
        return out


def _symbolic_sizes(tree) -> list:
    out = []
    for t in torch.utils._pytree.tree_leaves(tree):
        for e in t.shape if isinstance(t, torch.Tensor) else ():
            if isinstance(e, torch.SymInt):
                out += [(e.node.shape_env, s) for s in e.node.expr.free_symbols if not _fixed(e.node.shape_env, s)]
    return out


def _fixed(env, sym) -> bool:
    r = env.var_to_range.get(sym)
    return bool(getattr(env.replacements.get(sym), "is_number", False)) or (r is not None and r.lower == r.upper)


def _torch_name(func) -> str:
    name, module = getattr(func, "__name__", str(func)), getattr(func, "__module__", None) or "torch"
    if module == "torch._C._linalg":
        return f"torch.linalg.{name.removeprefix('linalg_')}"
    if "Tensor" in getattr(func, "__qualname__", ""):
        return f"Tensor.{name}"
    return f"{module.replace('torch._C._nn', 'torch.nn.functional')}.{name}"


def fixing_call(run) -> tuple[str | None, str | None]:
    """(the torch call and user line that fixed a symbolic size, the model's line where a size first became
    a constant) while `run` (an export that fails so) ran once more, watched. The call is None when the size
    was fixed outside a torch call (`int(x.shape[1])`, `for i in range(seq_len)`); the line then names it."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    watch, replace, lines = _SizeWatch(), ShapeEnv._set_replacement, []

    def noted(env, a, tgt, msg):
        if isinstance(tgt, sympy.Integer) and not lines:
            lines.append(_model_line(traceback.extract_stack()))
        return replace(env, a, tgt, msg)

    ShapeEnv._set_replacement = noted
    try:
        with watch:
            run()
    except Exception:  # noqa: BLE001 - the failure is known; only the watch's note is wanted
        pass
    finally:
        ShapeEnv._set_replacement = replace
    return watch.culprit, (lines[0] if lines else None)


def _model_line(stack) -> str | None:
    """The innermost frame of the model's code (a library's too, such as transformers; not torch's, the
    standard library's or ours)."""
    for f in reversed(stack):
        if not f.filename.startswith((_TORCH_DIR, _OURS, _STDLIB, "<")):
            return _where(f.filename, f.lineno, f.line)
    return None


def export_error(exc: BaseException, module: torch.nn.Module, dim: int, lo: int, hi: int, culprit=None) -> str:
    """One sentence (plus what to do) for an exception raised by torch.export; `culprit()`, asked only for a
    size torch fixed, names the torch call that fixed it (`fixing_call`), or None."""
    where = user_line(exc)
    at = f" at {where}" if where else ""
    text = str(exc)
    if "data-dependent" in text or type(exc).__name__ == "GuardOnDataDependentSymNode":
        return (
            f"data-dependent control flow{at}: the model branches on a tensor's value, which torch.export "
            "cannot trace with a symbolic length; compute both branches and pick with torch.where, or move "
            "the decision out of the model"
        )
    if "Constraints violated" in text or "specialized it to be a constant" in text:
        rnn = _recurrent(module)
        if rnn:
            return (
                f"{rnn}: a recurrent layer loops over the sequence in Python, so torch.export fixes the length "
                f"of dim {dim} instead of keeping it symbolic in [{lo}, {hi}]; recurrent layers are not "
                "supported, compile for one length (min_len == max_len) or replace the layer"
            )
        call, line = culprit() if culprit else (None, None)
        at = f" at {line}" if line else at
        if call:
            return (
                f"{call} fixes the size of dim {dim} instead of keeping it symbolic in [{lo}, {hi}]: torch's "
                "kernel for it needs the size as a number while torch.export traces it; compute the same "
                "result with other ops (e.g. sums and amax over dims), or compile one length (min_len == max_len)"
            )
        return (
            f"the model fixes the size of dim {dim}{at} instead of keeping it symbolic in [{lo}, {hi}] "
            "(e.g. an assert, a Python int of the size, or a loop over it); remove that dependence"
        )
    returned = re.search(r"Found <class '([^']+)'> in output", text)
    if returned:
        return (
            f"the model returns a {returned.group(1)}, which torch.export cannot flatten into tensors: return "
            "tensors from forward (a wrapper returning e.g. `.last_hidden_state`; a transformers cache: "
            "novella_mlir.causal_lm.compile_causal_lm compiles the decoder with its KV cache)"
        )
    return (
        f"torch.export failed{at} with dim {dim} symbolic in [{lo}, {hi}]: {_first_line(exc).rstrip('.')}. "
        "Check the example input's shape (every static dim must be what the model expects) and that it is "
        "within the bounds"
    )


def _recurrent(module: torch.nn.Module) -> str | None:
    for name, sub in module.named_modules():
        if isinstance(sub, _RECURRENT):
            return f"{type(sub).__name__} (self.{name}){_call_site(module, name)}"
    return None


def _call_site(module: torch.nn.Module, name: str) -> str:
    """` at file:line` where the parent module's forward calls `self.<name>`, if found."""
    attr = name.rpartition(".")[2]
    found = _find_line(module, name, "forward", rf"self\.{re.escape(attr)}\b")
    return f" at {_where(*found)}" if found else ""


def _find_line(module: torch.nn.Module, name: str, method: str, pattern: str):
    """(file, line, text) of the first line of `method` of the module owning `name` that matches `pattern`."""
    owner_name = name.rpartition(".")[0]
    owner = module.get_submodule(owner_name) if owner_name else module
    fn = getattr(type(owner), method)
    try:
        lines, start = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn)
    except (OSError, TypeError):
        return None
    for i, text in enumerate(lines):
        if re.search(pattern, text):
            return filename, start + i, text
    return None


def unbacked(prog) -> str | None:
    """The message for an exported graph whose sizes depend on tensor values (nonzero, unique, item...), naming
    the first op that makes such a size and its line, else None."""
    if not any(str(s).startswith("u") for s in prog.range_constraints):
        return None
    for node in prog.graph.nodes:
        if node.op == "call_function" and _unbacked_in(node.meta.get("val")):
            op = str(getattr(node.target, "__name__", node.target)).split(".")[0]
            where = _stack_line(node.meta.get("stack_trace") or "")
            return (
                f"torch.{op}{f' at {where}' if where else ''} returns a tensor whose size depends on the input's "
                "values, not only on its length; the NPU needs sizes known from the length (use a mask "
                "with torch.where instead)"
            )
    return "the exported graph has sizes that depend on tensor values (data-dependent ops are not supported)"


def _unbacked_in(val) -> bool:
    if isinstance(val, (list, tuple)):
        return any(_unbacked_in(v) for v in val)
    sizes = val.shape if isinstance(val, torch.Tensor) else [val] if isinstance(val, torch.SymInt) else []
    return any(
        isinstance(d, torch.SymInt) and any(str(s).startswith("u") for s in d.node.expr.free_symbols) for d in sizes
    )


def _stack_line(stack: str) -> str | None:
    """The innermost user frame (`file:line (`code`)`), and the innermost frame of a library's model code
    below it when there is one: `user.py:9 (`...`) (in modeling_x.py:120 (`...`))`."""
    m = re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s+(.*)', stack)
    user = [x for x in m if _is_user(x[0])] or m
    if not user:
        return None
    where = _where(user[-1][0], int(user[-1][1]), user[-1][2])
    lib = [x for x in m[m.index(user[-1]) + 1 :] if not x[0].startswith((_TORCH_DIR, _OURS, _STDLIB))]
    return f"{where} (in {_where(lib[-1][0], int(lib[-1][1]), lib[-1][2])})" if lib else where


def check_dtypes(module: torch.nn.Module) -> None:
    """Refuses a float16/bfloat16 parameter (a low-precision model) and a complex parameter or buffer,
    naming it and where it is set. float64 is demoted like the ops that compute in it; a float16/bfloat16
    buffer is a constant whose values float32 holds exactly (recurrent_gemma's `normalizer`): an op that
    computes in that dtype is refused where it is produced."""
    low = (torch.float16, torch.bfloat16)
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        param = isinstance(t, torch.nn.Parameter)
        if t.is_complex() or (param and t.dtype in low):
            raise NovellaError(
                f"{'parameter' if param else 'buffer'} '{name}'{_defined_at(module, name)} is {t.dtype}; the "
                "NPU computes in float32: create it as float32 (or call model.float() before compiling)"
            )


def _defined_at(module: torch.nn.Module, name: str) -> str:
    """` (file:line)` where `name` is registered or assigned in its module's __init__, if found."""
    attr = re.escape(name.rpartition(".")[2])
    found = _find_line(module, name, "__init__", rf"register_(buffer|parameter)\(\s*['\"]{attr}['\"]|self\.{attr}\s*=")
    return f" ({_where(found[0], found[1], None)})" if found else ""


def assumed(prog, lo: int, hi: int, failing_lengths) -> str:
    """The conditions torch.export assumed at the example that fail elsewhere in [lo, hi] (one symbol), with
    their lines: an `int()` of a size (transformers' `torch_int`) fixes the size to the example's value while
    the range stays, so the traced program computes a different model at the other lengths. `failing_lengths`
    is `exporting.failing_lengths` (which imports this module)."""
    env = next((d.node.shape_env for n in prog.graph.nodes for d in getattr(n.meta.get("val"), "shape", ())
                if isinstance(d, torch.SymInt)), None)  # fmt: skip
    out = []
    for g in env.guards if env is not None else ():
        try:
            bad = failing_lengths(g.expr, lo, hi) if len(g.expr.free_symbols) == 1 else []
        except Exception:  # noqa: BLE001 - a guard numpy cannot evaluate is left out of the hint
            bad = []
        if bad and isinstance(g.expr, sympy.Eq):
            out.append(f"{g.expr} ({str(g.sloc).strip('()')}; false at {len(bad)} lengths, e.g. {bad[0]})")
    if not out:
        return ""
    return (
        "\ntorch.export fixed a size of the length at the example's value, for the whole range: "
        + "; ".join(out[:3])
        + ". An int() of a size (transformers' torch_int) does this; keep the size a SymInt, or compile the "
        "lengths where it holds (min_len, max_len)"
    )
