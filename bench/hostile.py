"""Hostile-user reproduction of issues 12 and 20 (`hostile_trust*.py`): tries bad inputs by category and counts outcomes.

    .venv/bin/python bench/hostile.py [--only CATEGORY] [-v]

Each case is classified as
  ok        the expected outcome: a clean, actionable error (NovellaError / `file:line:col: error:`
            diagnostic) where the input is bad, or the correct result where it is valid;
  traceback a Python traceback, "internal error", crash (signal) or hang;
  wrong     bad input accepted (exit 0, a silently wrong or different answer).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile_opt  # noqa: E402
import hostile_trust  # noqa: E402, F401 - issue 20's cases register themselves
import hostile_trust_lm  # noqa: E402, F401
from hostile_lib import CASES, OPT, ROOT, Wrong, case  # noqa: E402, F401

VERBOSE = False


# ------------------------------------------------------------------ artifacts

_NPU: dict = {}


def _npu():
    if not _NPU:
        import models
        import torch

        from novella_mlir import compile_torch

        npu = compile_torch(models.mlp(), torch.randn(1, 16, 64), dynamic_dim=1, min_len=1, max_len=256)
        d = Path(tempfile.mkdtemp())
        npu.save(d / "m.nvla")
        x = torch.randn(1, 37, 64)
        _NPU.update(npu=npu, path=d / "m.nvla", dir=d, x=x, y=npu(x))
    return _NPU


def _resave(edit) -> Path:
    """The saved MLP with its metadata JSON edited and the checksum recomputed."""
    import hashlib
    import struct

    n = _npu()
    data = n["path"].read_bytes()
    hlen = struct.unpack("<I", data[8:12])[0]
    header = json.loads(data[12 : 12 + hlen])
    meta = data[12 + hlen : 12 + hlen + header["meta_bytes"]]
    blob = data[12 + hlen + header["meta_bytes"] :]
    m = json.loads(meta)
    edited = edit(m)
    meta = edited if isinstance(edited, bytes) else json.dumps(m).encode()
    header.update(meta_bytes=len(meta), sha256=hashlib.sha256(meta + blob).hexdigest())
    hb = json.dumps(header).encode()
    path = n["dir"] / f"edit{len(list(n['dir'].iterdir()))}.nvla"
    path.write_bytes(data[:8] + struct.pack("<I", len(hb)) + hb + meta + blob)
    return path


def _run_artifact(path) -> None:
    """Loads and runs; clean NovellaError = ok, identical output = ok, else wrong."""
    import torch

    import novella_mlir

    n = _npu()
    try:
        model = novella_mlir.load(path)
        y = model(n["x"])
    except novella_mlir.NovellaError as e:
        if VERBOSE:
            print("     ", str(e).splitlines()[0][:240])
        return
    if not torch.equal(y, n["y"]):
        raise Wrong("accepted, different output")


def _inst(m, opcode):
    return next(i for mm in m["macros"] for i in mm["insts"] if i["opcode"] == opcode)


def _art_case(name, edit):
    def fn():
        _run_artifact(_resave(edit))

    fn.__name__ = name
    case("artifact")(fn)


def _set(path, value):
    def edit(m):
        obj = m
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return edit


for _name, _edit in {
    "weights_overlap_input": lambda m: m["programs"][0]["inputs"][0].__setitem__("dram", [0]),
    "output_on_input": lambda m: m["programs"][0]["outputs"][0].__setitem__(
        "dram", m["programs"][0]["inputs"][0]["dram"]
    ),
    "grid_zero": lambda m: m["tiles"][0].__setitem__("grid", [[0]] + m["tiles"][0]["grid"][1:]),
    "grid_negative": lambda m: m["tiles"][1].__setitem__("grid", [[-2]] + m["tiles"][1]["grid"][1:]),
    "grid_zero_at_lower_bound": lambda m: m["tiles"][0].__setitem__(
        "grid", [["s0", 1, "floordiv"]] + m["tiles"][0]["grid"][1:]
    ),
    "bool_for_int": lambda m: _inst(m, "LOAD")["const"].__setitem__(next(iter(_inst(m, "LOAD")["const"])), True),
    "load_to_store": lambda m: _inst(m, "LOAD").__setitem__("opcode", "STORE"),
    "config_edited": lambda m: m["config"].__setitem__("dram_bytes_per_cycle", 64),
    "deep_json": lambda m: ('{"a":' * 100000 + "1" + "}" * 100000).encode(),
    "dram_too_small": _set(["programs", 0, "dram_size"], [10]),
    "zero_division": lambda m: m["tiles"][0].__setitem__("grid", [["s0", 0, "ceildiv"]] + m["tiles"][0]["grid"][1:]),
    "huge_dram": _set(["programs", 0, "dram_size"], [10**15]),
    "huge_weight_shape": lambda m: m["programs"][0]["weight_layout"][
        next(iter(m["programs"][0]["weight_layout"]))
    ].__setitem__(1, [10**9, 10**9]),
    "string_in_numeric": lambda m: _inst(m, "LOAD")["const"].__setitem__("cols", "abc"),
    "string_bound": lambda m: m["symbols"][0].__setitem__(1, "1"),
    "vecfn_31": lambda m: _inst(m, "VEC")["const"].__setitem__("fn", 31),
    "vecmode_9": lambda m: _inst(m, "VEC")["const"].__setitem__("mode", 9),
    "field_too_wide": lambda m: _inst(m, "LOAD")["const"].__setitem__("sram_stride", 1 << 20),
    "unknown_field": lambda m: _inst(m, "LOAD")["const"].__setitem__("bogus", 1),
    "metadata_not_object": lambda m: b"[1, 2, 3]",
    "symbols_empty": _set(["symbols"], []),
    "bounds_reversed": lambda m: m["symbols"].__setitem__(0, ["T", 300, 2]),
    "bounds_huge": lambda m: m["symbols"].__setitem__(0, ["T", 1, 2**40]),
    "weight_offset_negative": lambda m: m["programs"][0]["weight_layout"][
        next(iter(m["programs"][0]["weight_layout"]))
    ].__setitem__(0, -64),
    "weights_overlap_each_other": lambda m: [v.__setitem__(0, 0) for v in m["programs"][0]["weight_layout"].values()],
    "tile_base_negative": lambda m: m["tiles"][0]["bases"].__setitem__("-1", [-100]),
    "input_shape_string": lambda m: m["programs"][0]["inputs"][0].__setitem__("shape", "abc"),
    "n_dims_negative": lambda m: m["macros"][0].__setitem__("n_dims", -1),
    "macros_null": _set(["macros"], None),
}.items():
    _art_case(_name, _edit)


@case("artifact")
def header_huge_meta_bytes():
    import struct

    n = _npu()
    data = n["path"].read_bytes()
    hb = json.dumps({"meta_bytes": 10**12, "blob_bytes": 0, "sha256": "0" * 64}).encode()
    p = n["dir"] / "hdr.nvla"
    p.write_bytes(data[:8] + struct.pack("<I", len(hb)) + hb + data[12 + struct.unpack("<I", data[8:12])[0] :])
    _run_artifact(p)


@case("artifact")
def header_len_huge():
    import struct

    n = _npu()
    p = n["dir"] / "hlen.nvla"
    p.write_bytes(b"NVLA" + struct.pack("<II", 1, 2**31) + b"{}")
    _run_artifact(p)


@case("artifact")
def directory_as_artifact():
    _run_artifact(_npu()["dir"])


# ------------------------------------------------------------------ runtime inputs


def _call(x, expect_ok=False, **kw):
    import torch

    import novella_mlir

    n = _npu()
    try:
        y = n["npu"](x, **kw)
    except novella_mlir.NovellaError as e:
        if expect_ok:
            raise Wrong(f"refused: {e}") from None
        return str(e)
    if not expect_ok:
        raise Wrong(f"accepted ({getattr(x, 'dtype', type(x).__name__)})")
    ref = n["npu"](torch.as_tensor(x, dtype=torch.float32))
    if not torch.equal(y.nan_to_num(7.0), ref.nan_to_num(7.0)):
        raise Wrong("cast result differs")
    return None


def _rt(name, make, expect_ok=False, **kw):
    def fn():
        _call(make(), expect_ok=expect_ok, **kw)

    fn.__name__ = name
    case("runtime")(fn)


def _t(dtype):
    import torch

    return lambda: torch.randn(1, 9, 64).to(dtype)


def _setup_runtime():
    import numpy as np
    import torch

    _rt("float64", _t(torch.float64))
    _rt("float16", _t(torch.float16))
    _rt("int64", _t(torch.int64))
    _rt("bool", _t(torch.bool))
    _rt("complex64", lambda: torch.randn(1, 9, 64, dtype=torch.complex64))
    _rt("float64_1e300", lambda: torch.full((1, 9, 64), 1e300, dtype=torch.float64))
    _rt("numpy_float64", lambda: np.random.randn(1, 9, 64))
    _rt("python_list", lambda: np.random.randn(1, 9, 64).tolist())
    _rt("bfloat16", _t(torch.bfloat16))
    _rt("meta", lambda: torch.empty(1, 9, 64, device="meta"))
    _rt("sparse", lambda: torch.randn(1, 9, 64).to_sparse())
    _rt("zero_d", lambda: torch.tensor(1.0))
    _rt("none", lambda: None)
    _rt("string", lambda: "abc")
    _rt("requires_grad_ok", lambda: torch.randn(1, 9, 64, requires_grad=True), expect_ok=True)
    _rt("noncontiguous_ok", lambda: torch.randn(1, 64, 9).transpose(1, 2), expect_ok=True)
    _rt("numpy_f32_ok", lambda: np.random.randn(1, 9, 64).astype(np.float32), expect_ok=True)
    _rt("cast_float64_ok", _t(torch.float64), expect_ok=True, cast=True)
    _rt("cast_int64_ok", _t(torch.int64), expect_ok=True, cast=True)
    _rt("cast_complex_refused", lambda: torch.randn(1, 9, 64, dtype=torch.complex64), cast=True)
    _rt("cast_1e300_refused", lambda: torch.full((1, 9, 64), 1e300, dtype=torch.float64), cast=True)
    _rt("nan_input_ok", lambda: torch.full((1, 9, 64), float("nan")), expect_ok=True)
    _rt("length_zero", lambda: torch.randn(1, 0, 64))
    _rt("length_over", lambda: torch.randn(1, 257, 64))


_setup_runtime()


@case("runtime")
def threads_last_run():
    import torch

    n = _npu()
    npu, bad, errors = n["npu"], [], []

    def work(t):
        for i in range(20):
            length = 1 + (t * 20 + i) % 40
            try:
                run = npu.run(torch.randn(1, length, 64))[1] if hasattr(npu, "run") else None
                if run is None:
                    npu(torch.randn(1, length, 64))
                    run = npu.last_run
                if run.symbols["T"] != length:
                    bad.append(length)
            except Exception as e:  # noqa: BLE001
                errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    if bad:
        raise Wrong(f"{len(bad)} of 80 calls read another thread's run")


# ------------------------------------------------------------------ the `novella` CLI


def _cli(argv, expect_ok=False):
    from novella_mlir.tools import cli

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = cli.main(argv)
        except SystemExit as e:
            rc = e.code
    text = err.getvalue()
    if "Traceback" in text:
        raise RuntimeError(text.strip().splitlines()[-1])
    if expect_ok and rc != 0:
        raise Wrong(f"refused: {text[:200]}")
    if not expect_ok and rc == 0:
        raise Wrong(f"accepted: {out.getvalue()[:200]}")
    return text


def _cli_case(name, argv_fn, expect_ok=False):
    def fn():
        _cli(argv_fn(), expect_ok)

    fn.__name__ = name
    case("cli")(fn)


for _name, _argv, _ok in (
    ("len_negative", lambda: ["run", str(_npu()["path"]), "--len", "-5"], False),
    ("len_zero", lambda: ["run", str(_npu()["path"]), "--len", "0"], False),
    ("len_duplicate", lambda: ["run", str(_npu()["path"]), "--len", "T=5,T=6"], False),
    ("len_unknown_symbol", lambda: ["run", str(_npu()["path"]), "--len", "S=5"], False),
    ("len_huge", lambda: ["run", str(_npu()["path"]), "--len", "99999999999999"], False),
    ("len_text", lambda: ["run", str(_npu()["path"]), "--len", "abc"], False),
    ("len_float", lambda: ["run", str(_npu()["path"]), "--len", "5.5"], False),
    ("len_ok", lambda: ["run", str(_npu()["path"]), "--len", "7"], True),
    ("run_missing_file", lambda: ["run", "/nonexistent.nvla", "--len", "5"], False),
    ("run_directory", lambda: ["run", str(_npu()["dir"]), "--len", "5"], False),
    ("run_deep_json", lambda: ["run", str(_resave(lambda m: ("[" * 100000 + "]" * 100000).encode())), "--len", "5"], False),
    ("run_vecfn_31", lambda: ["run", str(_resave(lambda m: _inst(m, "VEC")["const"].__setitem__("fn", 31))), "--len", "5"], False),
    ("run_string_field", lambda: ["run", str(_resave(lambda m: _inst(m, "LOAD")["const"].__setitem__("rows", "x"))), "--len", "5"], False),
    ("run_dram_small", lambda: ["run", str(_resave(_set(["programs", 0, "dram_size"], [10]))), "--len", "5"], False),
    ("run_trace_unwritable", lambda: ["run", str(_npu()["path"]), "--len", "5", "--trace", "/nonexistent/dir/t.json"], False),
    ("run_bad_config", lambda: ["run", str(_npu()["path"]), "--len", "5", "--config", "/nonexistent.toml"], False),
    ("inspect_garbage", lambda: ["inspect", str(_resave(lambda m: b"garbage"))], False),
    ("inspect_zero_division", lambda: ["inspect", str(_resave(lambda m: m["tiles"][0].__setitem__("grid", [["s0", 0, "ceildiv"]] + m["tiles"][0]["grid"][1:])))], False),
    ("compile_bad_target", lambda: ["compile", "nonexistent_pkg_xyz:f", "--example-shape", "1,4,8"], False),
    ("compile_wrong_shape", lambda: ["compile", f"{ROOT}/bench/models.py:mlp", "--example-shape", "1,16,65", "-o", "/tmp/x.nvla"], False),
    ("compile_dim_out_of_range", lambda: ["compile", f"{ROOT}/bench/models.py:mlp", "--example-shape", "1,16,64", "--dynamic-dim", "5", "-o", "/tmp/x.nvla"], False),
    ("compile_min_gt_max", lambda: ["compile", f"{ROOT}/bench/models.py:mlp", "--example-shape", "1,16,64", "--min-len", "10", "--max-len", "2", "-o", "/tmp/x.nvla"], False),
    ("compile_bad_pass_option", lambda: ["compile", f"{ROOT}/bench/models.py:mlp", "--example-shape", "1,16,64", "--pass-option", "novella-tile:tile-m=-3", "-o", "/tmp/x.nvla"], False),
    ("compile_unknown_pass", lambda: ["compile", f"{ROOT}/bench/models.py:mlp", "--example-shape", "1,16,64", "--pass-option", "novella-nope:x=1", "-o", "/tmp/x.nvla"], False),
):  # fmt: skip
    _cli_case(_name, _argv, _ok)


# ------------------------------------------------------------------ security


@case("security")
def demo_ignores_cwd():
    from novella_mlir.tools import cli

    d = Path(tempfile.mkdtemp())
    (d / "examples").mkdir()
    (d / "examples" / "whisper_encoder.py").write_text("raise SystemExit('planted file ran')\n")
    old = os.getcwd()
    os.chdir(d)
    try:
        path = cli.demo_script() if hasattr(cli, "demo_script") else None
    finally:
        os.chdir(old)
    if path is not None and Path(path).resolve().is_relative_to(d.resolve()):
        raise Wrong(f"demo would run {path}")


@case("security")
def demo_uses_installed_package():
    from novella_mlir.tools import cli

    path = cli.demo_script() if hasattr(cli, "demo_script") else None
    pkg = Path(__import__("novella_mlir").__file__).parent
    if path is not None and not Path(path).resolve().is_relative_to(pkg):
        raise Wrong(f"demo runs {path}, outside the installed package")


# ------------------------------------------------------------------ frontend messages


def _compile_msg(module, *args, want=()):
    import torch  # noqa: F401

    from novella_mlir import NovellaError, compile_torch

    try:
        compile_torch(module, *args, dynamic_dim=1, min_len=1, max_len=64)
    except NovellaError as e:
        msg = str(e)
        missing = [w for w in want if w not in msg]
        if missing:
            raise Wrong(f"message lacks {missing}: {msg.splitlines()[0][:200]}") from None
        return
    raise Wrong("compiled")


@case("frontend")
def data_dependent_if():
    import torch

    class M(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    _compile_msg(M(), torch.randn(1, 8, 4), want=("data-dependent", "hostile.py:", "x.sum() > 0"))


@case("frontend")
def nonzero():
    import torch

    class M(torch.nn.Module):
        def forward(self, x):
            return torch.nonzero(x)

    _compile_msg(M(), torch.randn(1, 8, 4), want=("nonzero", "hostile.py:"))


@case("frontend")
def lstm():
    import torch

    m = torch.nn.LSTM(4, 8, batch_first=True)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = m

        def forward(self, x):
            return self.lstm(x)[0]

    _compile_msg(M(), torch.randn(1, 8, 4), want=("LSTM", "hostile.py:"))


@case("frontend")
def non_f32_buffer():
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.ones(4, dtype=torch.float64))

        def forward(self, x):
            return x * self.scale

    _compile_msg(M(), torch.randn(1, 8, 4), want=("scale", "float64", "hostile.py:"))


@case("frontend")
def compile_prints_no_futurewarning():
    import warnings

    import torch

    from novella_mlir import compile_torch

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compile_torch(torch.nn.Sequential(torch.nn.ReLU()), torch.randn(1, 8, 4), dynamic_dim=1, min_len=1, max_len=64)
    fut = [x for x in w if issubclass(x.category, FutureWarning)]
    if fut:
        raise Wrong(f"FutureWarning: {str(fut[0].message)[:100]}")


@case("frontend")
def wrong_example_shape_is_short():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = "import sys; from novella_mlir.tools.cli import main; sys.exit(main())"
    p = subprocess.run(
        [sys.executable, "-c", code, "compile", f"{ROOT}/bench/models.py:mlp", "--example-shape", "1,16,65", "-o",
         "/tmp/x.nvla"], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith(("[", "      "))]
    if p.returncode == 0:
        raise Wrong("compiled")
    if "Traceback" in p.stderr or len(lines) > 4:
        raise Wrong(f"{len(lines)} lines of stderr: {lines[:3]}")


# ------------------------------------------------------------------ driver


def run(only=None, verbose=False) -> dict:
    global VERBOSE
    VERBOSE = verbose
    d = Path(tempfile.mkdtemp())
    import models
    import torch

    from novella_mlir import compile_torch

    compile_torch(models.mlp(), torch.randn(1, 16, 64), dynamic_dim=1, min_len=1, max_len=256, dump_dir=d)
    hostile_opt.STAGES = d
    counts: dict = defaultdict(lambda: defaultdict(int))
    for cat, name, fn in CASES:
        if only and not cat.startswith(only):
            continue
        try:
            fn()
            outcome, detail = "ok", ""
        except Wrong as e:
            outcome, detail = "wrong", str(e)
        except BaseException as e:  # noqa: BLE001
            outcome, detail = "traceback", f"{type(e).__name__}: {str(e)[:200]}"
            if verbose:
                traceback.print_exc()
        counts[cat][outcome] += 1
        if verbose or outcome != "ok":
            print(f"  {cat:<13} {name:<32} {outcome:<9} {detail.splitlines()[0] if detail else ''}", flush=True)
    print(f"\n{'category':<14}{'tried':>6}{'ok':>6}{'traceback':>11}{'wrong':>7}")
    for cat, c in counts.items():
        print(f"{cat:<14}{sum(c.values()):>6}{c['ok']:>6}{c['traceback']:>11}{c['wrong']:>7}")
    total = {k: sum(c[k] for c in counts.values()) for k in ("ok", "traceback", "wrong")}
    print(f"{'total':<14}{sum(total.values()):>6}{total['ok']:>6}{total['traceback']:>11}{total['wrong']:>7}")
    return counts


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="run only the categories starting with this")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    run(a.only, a.verbose)
