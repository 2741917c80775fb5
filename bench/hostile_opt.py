"""bench/hostile.py's novella-opt cases: crashes, hangs, accepted invalid IR, silent no-ops,
internal errors, plain MLIR (run as subprocesses, so a segfault or a hang is counted, not fatal)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from hostile_lib import OPT, ROOT, Wrong, case

MLP_MAPS = "#x = affine_map<()[s0] -> (1, s0, 64)>\n#y = affine_map<()[s0] -> (1, s0, 256)>\n"


def _linear(weight="256x64", inner="64", sym='{s0 = ["T", 1, 256]}', extra="", act='act = "none"'):
    n = weight.split("x")[0]
    return (
        f"module attributes {{novella.symbols = {sym}}} {{\n"
        f"  func.func @f(%x: tensor<1x?x{inner}xf32, affine_map<()[s0] -> (1, s0, {inner})>>{extra}) "
        f"-> tensor<1x?x{n}xf32, affine_map<()[s0] -> (1, s0, {n})>> {{\n"
        f'    %w = "novella.weight"() {{name = "w"}} : () -> tensor<{weight}xf32>\n'
        f'    %b = "novella.weight"() {{name = "b"}} : () -> tensor<{n}xf32>\n'
        f'    %0 = "novella.linear"(%x, %w, %b) {{{act}}} : (tensor<1x?x{inner}xf32, affine_map<()[s0] -> '
        f"(1, s0, {inner})>>, tensor<{weight}xf32>, tensor<{n}xf32>) -> tensor<1x?x{n}xf32, "
        f"affine_map<()[s0] -> (1, s0, {n})>>\n"
        f"    return %0 : tensor<1x?x{n}xf32, affine_map<()[s0] -> (1, s0, {n})>>\n  }}\n}}\n"
    )


def _opt(args, stdin: bytes | str, expect_ok: bool = False, timeout: float = 20) -> str:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        p = subprocess.run(OPT + list(args), input=data, capture_output=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"hang (> {timeout} s)") from None
    err = p.stderr.decode(errors="replace")
    if p.returncode < 0:
        raise RuntimeError(f"crash (signal {-p.returncode})")
    if "Traceback" in err or "internal error" in err:
        lines = err.strip().splitlines()
        raise RuntimeError(next((ln for ln in lines if "error" in ln.lower()), lines[-1])[:300])
    if expect_ok:
        if p.returncode != 0:
            raise Wrong(f"refused valid input: {err.strip()[:300]}")
        return p.stdout.decode()
    if p.returncode == 0:
        raise Wrong("accepted (exit 0)")
    if ": error: " not in err:
        raise Wrong(f"no located diagnostic: {err[:200]}")
    return err


def _stage(n: int) -> str:
    return (STAGES / f"{n:02d}-{_STAGE_NAMES[n]}.mlir").read_text()


_STAGE_NAMES = {1: "novella", 2: "novella-shape-infer", 3: "novella-legalize", 4: "novella-allocate",
                5: "novella-tile", 6: "novella-macro-gen", 7: "novella-inst-gen"}  # fmt: skip
STAGES: Path = Path()  # set by hostile.run() to a dump of the MLP


@case("opt-crash")
def deep_brackets():
    _opt([], "module attributes {x = " + "[" * 100000 + "]" * 100000 + "} {}")


@case("opt-crash")
def deep_regions():
    inner = '"builtin.module"() ({\n' * 20000 + "}) : () -> ()\n" * 20000
    _opt([], inner)


@case("opt-crash")
def deep_modules():
    _opt([], "module {\n" * 20000 + "}\n" * 20000)


@case("opt-hang")
def huge_weight_dim_tile():
    text = _stage(4).replace("256x64xf32", "99999999999x64xf32")
    _opt(["--novella-tile"], text, timeout=30)


@case("opt-hang")
def huge_weight_dim_allocate():
    _opt(["--novella-legalize", "--novella-allocate", "--novella-tile"], _linear(weight="99999999999x64"), timeout=30)


@case("opt-accepted")
def tile_m_negative():
    _opt(["--novella-tile=tile-m=-3"], _stage(4))


@case("opt-accepted")
def tile_m_zero():
    _opt(["-p", "builtin.module(novella-tile{tile-m=0})"], _stage(4), expect_ok=True)  # 0 = per op (documented)


@case("opt-accepted")
def undeclared_symbol():
    text = _linear().replace("(1, s0, 64)>>", "(1, s1, 64)>>").replace("()[s0] -> (1, s1", "()[s0, s1] -> (1, s1")
    _opt(["--novella-shape-infer"], text)


@case("opt-accepted")
def bounds_reversed():
    _opt(["--novella-shape-infer"], _linear(sym='{s0 = ["T", 300, 2]}'))


@case("opt-accepted")
def bounds_negative():
    _opt(["--novella-shape-infer"], _linear(sym='{s0 = ["T", -5, 256]}'))


@case("opt-accepted")
def bounds_huge():
    _opt(["--novella-shape-infer"], _linear(sym='{s0 = ["T", 1, 1099511627776]}'))


@case("opt-accepted")
def config_no_functions():
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write("[vector]\nfunctions = []\n")
    _opt(["--config", f.name, "--novella-tile"], _stage(4))


@case("opt-accepted")
def config_unknown_function():
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write('[vector]\nfunctions = ["add", "sin"]\n')
    _opt(["--config", f.name, "--novella-tile"], _stage(4))


@case("opt-noop")
def tile_on_unallocated():
    _opt(["--novella-tile"], _stage(3))


@case("opt-noop")
def inst_gen_on_untiled():
    _opt(["--novella-inst-gen"], _stage(4))


@case("opt-noop")
def macro_gen_on_untiled():
    _opt(["--novella-macro-gen"], _stage(4))


@case("opt-noop")
def allocate_on_unlegalized_is_fine():
    _opt(["--novella-allocate"], _stage(1), expect_ok=True)  # every op has a kernel: valid input


@case("opt-noop")
def allocate_on_torch():
    _opt(["--novella-allocate"], (STAGES / "00-torch.mlir").read_text())


@case("opt-noop")
def tile_on_plain_dynamic():
    _opt(["--novella-tile"], _stage(4).replace("tensor<1x?x64xf32, #map>", "tensor<1x?x64xf32>"))


@case("opt-noop")
def legalize_on_torch():
    _opt(["--novella-legalize"], (STAGES / "00-torch.mlir").read_text())


@case("opt-internal")
def linear_two_operands():
    text = _linear().replace('"novella.linear"(%x, %w, %b)', '"novella.linear"(%x, %w)')
    text = text.replace("tensor<256x64xf32>, tensor<256xf32>) ->", "tensor<256x64xf32>) ->")
    _opt([], text)


@case("opt-internal")
def unranked_tensor():
    _opt([], 'func.func @f(%x: tensor<*xf32>) -> tensor<*xf32> {\n  %0 = "novella.relu"(%x) : (tensor<*xf32>) -> '
         "tensor<*xf32>\n  return %0 : tensor<*xf32>\n}\n")  # fmt: skip


@case("opt-internal")
def unranked_linear():
    text = _linear().replace("tensor<256x64xf32>", "tensor<*xf32>")
    _opt([], text)


@case("opt-internal")
def act_integer():
    _opt([], _linear(act="act = 3 : i64"))


@case("opt-internal")
def zero_inner_dim():
    _opt(["--novella-legalize", "--novella-allocate", "--novella-tile"], _linear(weight="256x0", inner="0"))


@case("opt-internal")
def symbols_string():
    _opt(["--novella-shape-infer"], _linear(sym='"T"'))


@case("opt-internal")
def symbols_short_list():
    _opt(["--novella-shape-infer"], _linear(sym='{s0 = ["T", 1]}'))


@case("opt-internal")
def invalid_utf8():
    _opt([], b"module {\xff\xfe}\n")


@case("opt-internal")
def slice_string_dim():
    _opt([], 'func.func @f(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {\n  %0 = "novella.slice"(%x) {dim = "a", '
         'start = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x4xf32>\n  return %0 : tensor<4x4xf32>\n}\n')  # fmt: skip


@case("opt-internal")
def transpose_bad_perm_type():
    _opt([], 'func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {\n  %0 = "novella.transpose"(%x) {perm = 3} : '
         "(tensor<4x8xf32>) -> tensor<8x4xf32>\n  return %0 : tensor<8x4xf32>\n}\n")  # fmt: skip


@case("opt-internal")
def matmul_rank1():
    _opt([], 'func.func @f(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {\n  %0 = "novella.matmul"(%x, %y)'
         " : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n")  # fmt: skip


@case("opt-plain")
def plain_dynamic_tensor():
    text = (
        "module {\n  func.func @f(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {\n"
        '    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>\n'
        '    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>\n'
        '    %0 = "novella.linear"(%x, %w, %b) : (tensor<?x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32>\n'
        "    return %0 : tensor<?x32xf32>\n  }\n}\n"
    )
    out = _opt(["--novella-shape-infer=max-len=512"], text, expect_ok=True)
    if "s0" not in out or '"T"' not in out and "s0 = [" not in out:
        raise Wrong(f"no symbol in output: {out[:300]}")


@case("opt-plain")
def plain_two_args_unified():
    text = (
        "module {\n  func.func @f(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> tensor<?x64xf32> {\n"
        '    %0 = "novella.add"(%x, %y) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>\n'
        "    return %0 : tensor<?x64xf32>\n  }\n}\n"
    )
    out = _opt(["--novella-shape-infer"], text, expect_ok=True)
    if "s1" in out:
        raise Wrong("two symbols where add requires equal sizes")


@case("opt-plain")
def matmul_without_transpose_rhs():
    text = (
        "func.func @f(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {\n"
        '  %0 = "novella.matmul"(%a, %b) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>\n'
        "  return %0 : tensor<4x16xf32>\n}\n"
    )
    _opt([], text, expect_ok=True)


@case("opt-plain")
def conv_without_layout_act():
    text = (
        "func.func @f(%x: tensor<1x4x16xf32>) -> tensor<1x8x14xf32> {\n"
        '  %w = "novella.weight"() {name = "w"} : () -> tensor<8x4x3xf32>\n'
        '  %b = "novella.weight"() {name = "b"} : () -> tensor<8xf32>\n'
        '  %0 = "novella.conv1d"(%x, %w, %b) {stride = 1 : i64, padding = 0 : i64} : (tensor<1x4x16xf32>, '
        "tensor<8x4x3xf32>, tensor<8xf32>) -> tensor<1x8x14xf32>\n  return %0 : tensor<1x8x14xf32>\n}\n"
    )
    _opt([], text, expect_ok=True)
