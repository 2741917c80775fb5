"""Issue 12: every bad input gets a clean, located error (artifacts, runtime inputs, CLI, novella-opt, frontend)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import threading
import types
import warnings

import numpy as np
import pytest
import torch

import novella_mlir
from novella_mlir import ArtifactError, InputError, NovellaError, artifact, compile_torch
from novella_mlir.tools import cli, novella_opt


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)).eval()


@pytest.fixture(scope="module")
def npu():
    return compile_torch(_mlp(), torch.randn(1, 8, 16), dynamic_dim=1, min_len=1, max_len=256)


@pytest.fixture(scope="module")
def saved(npu, tmp_path_factory):
    path = tmp_path_factory.mktemp("art") / "m.nvla"
    npu.save(path)
    return path


X = torch.randn(1, 37, 16)


def _parts(data: bytes):
    hlen = struct.unpack("<I", data[8:12])[0]
    header = json.loads(data[12 : 12 + hlen])
    meta = data[12 + hlen : 12 + hlen + header["meta_bytes"]]
    return header, meta, data[12 + hlen + header["meta_bytes"] :]


def _resave(path, out, edit):
    """`path` with its metadata edited by `edit(dict)` and the sha256 recomputed (an attacker without the key)."""
    header, meta, blob = _parts(path.read_bytes())
    m = json.loads(meta)
    new = edit(m)
    meta = new if isinstance(new, bytes) else json.dumps(m).encode()
    header.update(meta_bytes=len(meta), sha256=hashlib.sha256(meta + blob).hexdigest())
    hb = json.dumps(header).encode()
    out.write_bytes(b"NVLA" + struct.pack("<II", artifact.FORMAT_VERSION, len(hb)) + hb + meta + blob)
    return out


def _p(m):
    """The first (here: only) program of the metadata."""
    return m["programs"][0]


def _tile0(m):
    """The first tile rule of the first program (tile rules are pooled; the program lists them)."""
    return m["tiles"][_p(m)["tiles"][0]]


def _inst(m, opcode):
    return next(i for mm in m["macros"] for i in mm["insts"] if i["opcode"] == opcode)


def _const_rows_load(m):
    """The first LOAD whose rows are a constant (a fused MLP's first LOAD, x's rows, has them variable)."""
    return next(i for mm in m["macros"] for i in mm["insts"] if i["opcode"] == "LOAD" and "rows" in i["const"])


EDITS = {
    "weights overlap the input": (lambda m: _p(m)["inputs"][0].__setitem__("dram", [0]), "overlaps"),
    "output on the input": (lambda m: _p(m)["outputs"][0].__setitem__("dram", _p(m)["inputs"][0]["dram"]), "overlaps"),
    "grid 0": (lambda m: _tile0(m)["grid"].__setitem__(0, [0]), r"tiles\[0\].grid\[0\]: extent 0"),
    "grid negative": (lambda m: _tile0(m)["grid"].__setitem__(1, [-3]), r"tiles\[0\].grid\[1\]"),
    "bool for int": (lambda m: _inst(m, "LOAD")["const"].__setitem__("rows", True), r"const.rows: expected an integer"),
    "LOAD to STORE": (lambda m: _inst(m, "LOAD").__setitem__("opcode", "STORE"), "a STORE writes the macro's result"),
    "config edited": (lambda m: m["config"].__setitem__("dram_bytes_per_cycle", 64), "config_fingerprint"),
    "deep JSON": (lambda m: b"[" * 50000 + b"]" * 50000, "nested 50000 deep"),
    "DRAM too small": (lambda m: _p(m).__setitem__("dram_size", [10]), r"outside \[0, 10\)"),
    "divide by zero": (lambda m: _tile0(m)["grid"].__setitem__(1, ["s0", 0, "ceildiv"]), "divides by 0"),
    "huge DRAM": (lambda m: _p(m).__setitem__("dram_size", [10**15]), "dram_size"),
    "string in a field": (lambda m: _inst(m, "LOAD")["const"].__setitem__("cols", "abc"), r"const.cols"),
    "VecFn 31": (lambda m: _inst(m, "VEC")["const"].__setitem__("fn", 31), "not a valid VecFn"),
    "field too wide": (lambda m: _inst(m, "LOAD")["const"].__setitem__("sram_stride", 1 << 20), "sram_stride"),
    "bounds reversed": (lambda m: m["symbols"].__setitem__(0, ["T", 300, 2]), r"symbols\[0\]: bad symbol bounds"),
    "bounds 2^40": (lambda m: m["symbols"].__setitem__(0, ["T", 1, 2**40]), r"symbols\[0\]: bad symbol bounds"),
    "string bound": (lambda m: m["symbols"][0].__setitem__(1, "1"), r"symbols\[0\].min"),
    "divide by a symbol": (lambda m: _tile0(m)["grid"].__setitem__(1, ["s0", "s0", "floordiv"]), "a symbol"),
    "unknown symbol": (lambda m: _tile0(m)["grid"].__setitem__(1, ["s3"]), "refers to s3"),
    "programs overlap": (
        lambda m: m["programs"].append(json.loads(json.dumps(_p(m)))),
        r"programs\[\d\].ranges: T in \[\d+, \d+\] overlaps programs",
    ),
    "programs leave a gap": (lambda m: _p(m)["ranges"][0].__setitem__(1, 5), r"do not cover the bounds T in"),
    "range outside the bounds": (lambda m: _p(m)["ranges"][0].__setitem__(0, 0), "not a sub-range of its bounds"),
    "no program": (lambda m: m.__setitem__("programs", []), "an artifact holds 1 to"),
    "pool index": (lambda m: _p(m)["tiles"].__setitem__(0, 999), r"programs\[0\].tiles\[0\]: value 999 is outside"),
    "foreign macro": (lambda m: _p(m)["macros"].pop(), r"programs\[0\].tiles\[\d+\].macro: tile rule \d+ names"),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_artifact_edits_are_refused_naming_the_field(saved, tmp_path, name):
    edit, match = EDITS[name]
    path = _resave(saved, tmp_path / "e.nvla", edit)
    with pytest.raises(ArtifactError, match=match) as e:
        novella_mlir.load(path)
    assert str(path) in str(e.value)


def test_size_caps_are_checked_before_reading(saved, tmp_path):
    p = tmp_path / "h.nvla"
    p.write_bytes(b"NVLA" + struct.pack("<II", artifact.FORMAT_VERSION, 2**31) + b"{}")
    with pytest.raises(ArtifactError, match="corrupted header"):
        artifact.load(p)
    header, meta, blob = _parts(saved.read_bytes())
    hb = json.dumps(dict(header, meta_bytes=10**12)).encode()
    p.write_bytes(b"NVLA" + struct.pack("<II", artifact.FORMAT_VERSION, len(hb)) + hb + meta + blob)
    with pytest.raises(ArtifactError, match="more than"):
        artifact.load(p)
    with pytest.raises(ArtifactError, match="not a file"):
        artifact.load(tmp_path)


def test_signing(npu, tmp_path):
    path = tmp_path / "s.nvla"
    npu.save(path, key=b"secret")
    assert torch.equal(novella_mlir.load(path, key=b"secret")(X), npu(X))
    with pytest.raises(ArtifactError, match="failed authentication"):
        novella_mlir.load(path, key=b"other")
    tampered = _resave(path, tmp_path / "t.nvla", lambda m: _const_rows_load(m)["const"].__setitem__("rows", 1))
    novella_mlir.load(tampered)  # sha256 recomputed: integrity alone cannot tell
    with pytest.raises(ArtifactError, match="failed authentication"):
        novella_mlir.load(tampered, key=b"secret")
    npu.save(tmp_path / "u.nvla")
    with pytest.raises(ArtifactError, match="not signed"):
        novella_mlir.load(tmp_path / "u.nvla", key=b"secret")


def _outcome(path, ref, key=None) -> str:
    try:
        y = novella_mlir.load(path, key=key)(X)
    except NovellaError:
        return "refused"
    return "identical" if torch.equal(y, ref) else "different"


def test_artifact_fuzz_bit_flips_and_field_edits(npu, saved, tmp_path):
    """Random bit flips anywhere, and random field edits of a signed artifact (sha256 recomputed):
    no traceback, each outcome refused or identical to the original."""
    ref = npu(X)
    rng = random.Random(0)
    data = saved.read_bytes()
    outcomes = []
    for _ in range(60):
        b = bytearray(data)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        (tmp_path / "f.nvla").write_bytes(bytes(b))
        outcomes.append(_outcome(tmp_path / "f.nvla", ref))
    signed = tmp_path / "signed.nvla"
    npu.save(signed, key="k")
    leaves = _leaves(json.loads(_parts(signed.read_bytes())[1]))
    for _ in range(40):
        path, _ = rng.choice(leaves)
        value = rng.choice([0, -1, 1, 2**33, True, None, "x", [], 1.5])
        edited = _resave(signed, tmp_path / "g.nvla", lambda m, p=path, v=value: _set(m, p, v))
        outcomes.append(_outcome(edited, ref, key="k"))
    assert set(outcomes) <= {"refused", "identical"}, outcomes


def test_type_breaking_edits_without_a_key_are_refused(saved, tmp_path):
    rng = random.Random(1)
    leaves = [p for p, v in _leaves(json.loads(_parts(saved.read_bytes())[1])) if isinstance(v, int)]
    for _ in range(40):
        path = rng.choice(leaves)
        value = rng.choice([True, None, "7", [1], {"a": 1}])
        edited = _resave(saved, tmp_path / "b.nvla", lambda m, p=path, v=value: _set(m, p, v))
        with pytest.raises(ArtifactError):
            novella_mlir.load(edited)


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _leaves(v, (*path, k))]
    if isinstance(obj, list):
        return [x for i, v in enumerate(obj) for x in _leaves(v, (*path, i))]
    return [(path, obj)]


def _set(m, path, value):
    for k in path[:-1]:
        m = m[k]
    m[path[-1]] = value


# ------------------------------------------------------------------ runtime inputs


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: X.double(), "dtype torch.float64.*cast=True"),
        (lambda: X.half(), "dtype torch.float16"),
        (lambda: X.long(), "dtype torch.int64"),
        (lambda: X > 0, "dtype torch.bool"),
        (lambda: X.to(torch.bfloat16), "dtype torch.bfloat16"),
        (lambda: X.to(torch.complex64), "dtype torch.complex64"),
        (lambda: X.numpy().astype(np.float64), "dtype torch.float64"),
        (lambda: X.tolist(), "is a list"),
        (lambda: torch.empty(1, 5, 16, device="meta"), "meta tensor"),
        (lambda: X.to_sparse(), "dense tensor"),
        (lambda: torch.tensor(1.0), "0-d"),
        (lambda: None, "is None"),
    ],
)
def test_bad_inputs_are_refused(npu, make, match):
    with pytest.raises(InputError, match=match):
        npu(make())


@pytest.mark.parametrize("args", [(X, X), (), (X, None)])
def test_a_wrong_number_of_inputs_is_refused(npu, args):
    with pytest.raises(InputError, match=f"expected 1 inputs .*got {len(args)}"):
        npu(*args)


def test_cast_converts_when_asked_and_refuses_lossy_casts(npu):
    ref = npu(X)
    assert torch.equal(npu(X.double(), cast=True), ref)
    assert torch.equal(npu(X.numpy().tolist(), cast=True), ref)
    with pytest.raises(InputError, match="imaginary|losing data"):
        npu(X.to(torch.complex64), cast=True)
    with pytest.raises(InputError, match="float32 range"):
        npu(torch.full((1, 5, 16), 1e300, dtype=torch.float64), cast=True)


def test_last_run_is_per_thread_and_run_returns_it(npu):
    bad, errors = [], []

    def work(t):
        for i in range(10):
            length = 1 + (7 * t + i) % 30
            try:
                npu(torch.randn(1, length, 16))
                if npu.last_run.symbols["T"] != length:
                    bad.append(length)
                _, run = npu.run(torch.randn(1, length + 1, 16))
                if run.symbols["T"] != length + 1:
                    bad.append(length)
            except Exception as e:
                errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not bad


# ------------------------------------------------------------------ the `novella` CLI


@pytest.mark.parametrize(
    "spec, match",
    [("-5", r"T=-5 is outside the compiled bounds \[1, 256\]"), ("T=5,T=6", "given twice"), ("5.5", "expects an int")],
)
def test_cli_len_is_checked_before_making_inputs(saved, capsys, spec, match):
    assert cli.main(["run", str(saved), "--len", spec]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and pytest.importorskip("re").search(match, err)


def test_cli_catches_everything(saved, tmp_path, capsys, monkeypatch):
    def boom(args):
        raise ZeroDivisionError("x")

    monkeypatch.setitem(cli.COMMANDS, "inspect", boom)
    assert cli.main(["inspect", str(saved)]) == 1
    assert "internal error: ZeroDivisionError" in capsys.readouterr().err
    bad = _resave(saved, tmp_path / "v.nvla", lambda m: _inst(m, "VEC")["const"].__setitem__("fn", 31))
    assert cli.main(["run", str(bad), "--len", "4"]) == 1
    assert "not a valid VecFn" in capsys.readouterr().err


def test_cli_validates_pass_options_and_bounds(capsys):
    argv = ["compile", "x:y", "--example-shape", "1,8,16", "--pass-option", "novella-tile:tile-m=-3"]
    assert cli.main(argv) == 1
    assert "must be in [0, 4095], got -3" in capsys.readouterr().err
    assert cli.main(["compile", "x:y", "--example-shape", "1,8,16", "--min-len", "9", "--max-len", "2"]) == 1
    assert "min-len" in capsys.readouterr().err


# ------------------------------------------------------------------ novella-opt

LINEAR = """module attributes {{novella.symbols = {sym}}} {{
  func.func @f(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {{
    %w = "novella.weight"() {{name = "w"}} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {{name = "b"}} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {{act = "none"}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %0 : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }}
}}
"""
VALID = LINEAR.format(sym='{s0 = ["T", 1, 256]}')


def _opt(tmp_path, capsys, text, *flags) -> tuple[int, str, str]:
    path = tmp_path / "in.mlir"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    rc = novella_opt.main([str(path), *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, err
    return rc, out, err


@pytest.mark.parametrize(
    "text, flags, match",
    [
        ("module {\n" * 2000 + "}\n" * 2000, [], "257:8: error: input nests 2000 levels deep"),
        ("module attributes {x = " + "[" * 100000 + "]" * 100000 + "} {}", [], "1:279: error: input nests 100001 levels deep"),
        (b"module {\xff}", [], "1:9: error: invalid UTF-8 byte 0xff"),
        (VALID, ["--novella-tile=tile-m=-3"], "must be in [0, 4095], got -3"),
        (LINEAR.format(sym='{s0 = ["T", 300, 2]}'), ["--novella-shape-infer"], "bounds [300, 2]"),
        (LINEAR.format(sym='{s0 = ["T", -5, 256]}'), ["--novella-shape-infer"], "bounds [-5, 256]"),
        (LINEAR.format(sym='{s0 = ["T", 1, 1099511627776]}'), ["--novella-shape-infer"], "24-bit"),
        (LINEAR.format(sym='"T"'), ["--novella-shape-infer"], "must be a dictionary"),
        (LINEAR.format(sym='{s0 = ["T", 1]}'), ["--novella-shape-infer"], "integer bounds"),
        (VALID.replace("affine_map<()[s0] -> (1, s0, 64)>", "affine_map<()[s0, s1] -> (1, s1, 64)>"),
         ["--novella-shape-infer"], "uses symbol s1, but novella.symbols declares s0"),
        (VALID, ["--novella-tile"], "--novella-tile expects the output of --novella-allocate"),
        (VALID, ["--novella-inst-gen"], "expects the output of --novella-macro-gen"),
        (VALID.replace('(%x, %w, %b) {act = "none"}', '(%x, %w) {act = "none"}').replace(
            "tensor<32x64xf32>, tensor<32xf32>) ->", "tensor<32x64xf32>) ->"), [], "expects 3 operand(s), got 2"),
        (VALID.replace('act = "none"', "act = 3 : i64"), [], "attribute 'act' must be a string attribute"),
        (VALID.replace("32x64xf32", "32x0xf32").replace("64xf32, affine", "0xf32, affine").replace("s0, 64)", "s0, 0)"),
         [], "zero-size dims"),
        ('func.func @f(%x: tensor<*xf32>) -> tensor<*xf32> {\n  %0 = "novella.relu"(%x) : (tensor<*xf32>) -> '
         "tensor<*xf32>\n  return %0 : tensor<*xf32>\n}\n", [], "expects ranked tensors"),
    ],
)  # fmt: skip
def test_novella_opt_diagnostics(tmp_path, capsys, text, flags, match):
    rc, _, err = _opt(tmp_path, capsys, text, *flags)
    assert rc == 1 and match in err and ": error: " in err, err


def test_huge_dim_does_not_hang(tmp_path, capsys):
    text = VALID.replace("32x64xf32", "99999999999x64xf32").replace("32xf32", "99999999999xf32")
    text = text.replace("s0, 32)", "s0, 99999999999)").replace("1x?x32xf32", "1x?x99999999999xf32")
    rc, _, err = _opt(tmp_path, capsys, text, "--novella-legalize", "--novella-allocate", "--novella-tile")
    assert rc == 1 and ": error: " in err


def test_plain_dynamic_tensors_and_default_attributes(tmp_path, capsys):
    text = """func.func @f(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>, %w: tensor<64x16xf32>) -> tensor<?x16xf32> {
  %0 = "novella.add"(%a, %b) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  %1 = "novella.matmul"(%0, %w) : (tensor<?x64xf32>, tensor<64x16xf32>) -> tensor<?x16xf32>
  return %1 : tensor<?x16xf32>
}
"""
    rc, out, err = _opt(tmp_path, capsys, text, "--novella-shape-infer=min-len=2 max-len=512")
    assert rc == 0, err
    assert 'novella.symbols = {s0 = ["T", 2, 512]}' in out and "s1" not in out
    assert "transpose_rhs = false" in out
    assert "tensor<?x16xf32, #map" in out


# ------------------------------------------------------------------ frontend messages


class _Branch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


class _Nonzero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x)


class _Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = torch.nn.LSTM(4, 8, batch_first=True)

    def forward(self, x):
        return self.rnn(x)[0]


class _Bf16(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))

    def forward(self, x):
        return x * self.scale


@pytest.mark.parametrize(
    "module, words",
    [
        (_Branch(), ["data-dependent control flow", "test_hardening.py:", "if x.sum() > 0:"]),
        (_Nonzero(), ["torch.nonzero", "test_hardening.py:", "torch.nonzero(x)"]),
        (_Lstm(), ["LSTM (self.rnn)", "test_hardening.py:", "self.rnn(x)"]),
        (_Bf16(), ["parameter 'scale'", "test_hardening.py:", "torch.bfloat16"]),
    ],
)
def test_frontend_messages_name_the_construct_and_line(module, words, capsys):
    with pytest.raises(NovellaError) as e:
        compile_torch(module, torch.randn(1, 8, 4), dynamic_dim=1, min_len=1, max_len=64)
    for w in words:
        assert w in str(e.value)
    assert "def forward" not in capsys.readouterr().err


class _Namespace(torch.nn.Module):
    def forward(self, x):
        return types.SimpleNamespace(y=x * 2)


def test_an_output_that_is_not_tensors_is_named_with_what_to_do():
    """As a stock transformers decoder returning its DynamicCache: the type and what to return instead."""
    with pytest.raises(NovellaError, match=r"returns a types\.SimpleNamespace, .*return tensors from forward"):
        compile_torch(_Namespace(), torch.randn(1, 8, 4), dynamic_dim=1, min_len=1, max_len=64)


def test_compile_prints_no_future_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_torch(torch.nn.ReLU(), torch.randn(1, 8, 4), dynamic_dim=1, min_len=1, max_len=64)
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("functions, match", [("[]", "is empty"), ('["add", "sinh"]', "unknown functions ['sinh']")])
def test_config_vector_functions_are_checked(tmp_path, capsys, functions, match):
    toml = tmp_path / "hw.toml"
    toml.write_text(f"[vector]\nfunctions = {functions}\n")
    rc, _, err = _opt(tmp_path, capsys, VALID, "--config", str(toml), "--novella-shape-infer")
    assert rc == 1 and match in err and f"{toml}:2:1: error:" in err, err


# ------------------------------------------------------------------ issue 20: read-only environments

_KERNEL = """
import numba as nb
from simulator import numba_cache

numba_cache.ensure(__file__)


@nb.njit(cache=True)
def inc(x):
    return x + 1


print(inc(41))
"""


@pytest.mark.parametrize("fallback", [True, False])
def test_numba_cache_falls_back_to_a_temp_dir_when_nothing_is_writable(tmp_path, fallback):
    """No writable __pycache__ (a file of that name), $HOME or XDG cache (under a file): numba would refuse to
    define a cached kernel; `numba_cache.ensure` moves the cache to a temp dir and says so."""
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "__pycache__").write_text("not a directory")
    (tmp_path / "blocker").write_text("")
    src = _KERNEL if fallback else _KERNEL.replace("numba_cache.ensure(__file__)", "")
    (tmp_path / "kern.py").write_text(src)
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=f"{root}:{tmp_path}", HOME=str(tmp_path / "blocker" / "home"),
               XDG_CACHE_HOME=str(tmp_path / "blocker" / "cache"))  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-B", "-c", "import kern"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    if fallback:
        assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr[-1500:]
        assert "numba's kernel cache has no writable directory" in r.stderr
    else:  # what the fallback is for
        assert r.returncode != 0 and "no locator available" in r.stderr


def test_every_cached_numba_module_sets_up_its_cache():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for path in [*root.glob("simulator/*.py"), *root.glob("novella_mlir/**/*.py")]:
        text = path.read_text()
        first = text.find("njit(cache=True") if path.name != "numba_cache.py" else -1
        if first >= 0:
            ensure = text.find("numba_cache.ensure(__file__)")
            assert 0 <= ensure < first, f"{path.name} defines cached kernels before numba_cache.ensure"


def test_the_numba_cache_digest_covers_every_module_a_kernel_imports():
    """A kernel inlines or freezes what it imports from the project: each such module is in SOURCES, so an
    edit to it empties the cache (numba itself checks only the kernel's own file)."""
    import ast
    from pathlib import Path

    from simulator import numba_cache

    root = Path(__file__).resolve().parents[2]
    covered = {p for pattern in numba_cache.SOURCES for p in root.glob(pattern)}
    for path in [p for p in covered if "numba_cache.ensure" in p.read_text()]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                dep = path.parent / f"{node.module.replace('.', '/')}.py"
            elif isinstance(node, ast.ImportFrom) and node.module in ("simulator", "simulator.isa"):
                dep = (
                    root / "simulator" / "isa.py"
                    if "isa" in [a.name for a in node.names] + [node.module[10:]]
                    else None
                )
            else:
                continue
            if dep is not None and dep.name not in ("numba_cache.py", "first_build.py"):
                assert dep in covered, f"{path.name} imports {dep.name}, not in numba_cache.SOURCES"


def test_a_numba_cache_filled_from_other_sources_is_emptied(tmp_path):
    from simulator import numba_cache

    (tmp_path / "k.inc-1.py311.nbi").write_bytes(b"old index")
    (tmp_path / "k.inc-1.py311.1.nbc").write_bytes(b"old code")
    (tmp_path / "k.cpython-311.pyc").write_bytes(b"bytecode")
    assert numba_cache.drop_stale(tmp_path, "digest-a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.cpython-311.pyc", numba_cache.DIGEST_FILE]
    (tmp_path / "k.inc-1.py311.nbi").write_bytes(b"new index")
    assert not numba_cache.drop_stale(tmp_path, "digest-a") and (tmp_path / "k.inc-1.py311.nbi").exists()
    assert numba_cache.drop_stale(tmp_path, "digest-b") and not (tmp_path / "k.inc-1.py311.nbi").exists()
    assert numba_cache.sources_digest() == numba_cache.sources_digest() != "digest-b"


class _TwoInputs(torch.nn.Module):
    def forward(self, q, kv):
        return q * 2 + kv


@pytest.mark.parametrize("alias", [lambda x: x, lambda x: x.view(x.shape)], ids=["same", "view"])
def test_one_example_passed_for_two_inputs_compiles_two_inputs(alias):
    """torch.export traces an example passed twice as one placeholder; each input must still be read."""
    ex = torch.randn(1, 16, 8)
    npu = compile_torch(_TwoInputs(), ex, alias(ex), dynamic_dim=1, min_len=1, max_len=40, cache=False)
    for t in (1, 7, 17, 40):
        q, kv = torch.randn(1, t, 8), torch.randn(1, t, 8)
        torch.testing.assert_close(npu(q, kv), _TwoInputs()(q, kv), rtol=1e-5, atol=1e-5)
