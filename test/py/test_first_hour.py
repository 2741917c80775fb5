"""What a new user meets first: versions, help texts, a torch-free novella-opt, the numba notice and the
demo's closing verdict (and exit code)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

import novella_mlir
from novella_mlir.tools import cli, novella_opt

ROOT = Path(__file__).resolve().parents[2]
LIT_INPUT = ROOT / "test" / "lit" / "transforms" / "novella-tile.mlir"


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=300,
    )  # fmt: skip


@pytest.mark.quick
def test_novella_opt_runs_passes_without_importing_torch():
    """Nor does it import sympy, numba or transformers to start (lit runs it about a hundred times): the
    passes that reason symbolically import sympy when they do."""
    code = (
        "import sys; from novella_mlir.tools import novella_opt as o\n"
        "print(sorted(m for m in ('sympy', 'numba', 'transformers', 'torch') if m in sys.modules))\n"
        f"rc = o.main([{str(LIT_INPUT)!r}, '--split-input-file', '--novella-tile', '-o', '/dev/null'])\n"
        "print(rc, sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    r = _python(code)
    assert r.returncode == 0, r.stderr
    started, ran = r.stdout.splitlines()
    assert started == "[]", f"novella-opt imported {started} to start"
    assert ran.split()[1:] == ["[]"], f"novella-opt imported {ran}"


@pytest.mark.quick
def test_versions(capsys):
    assert novella_mlir.__version__.count(".") == 2
    for main, name in ((cli.main, "novella"), (novella_opt.main, "novella-opt")):
        with pytest.raises(SystemExit) if main is cli.main else _no_raise():
            main(["--version"])
        assert capsys.readouterr().out.strip() == f"{name} {novella_mlir.__version__}"


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _actions(parser: argparse.ArgumentParser, path: str):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _actions(sub, f"{path} {name}")
        elif not isinstance(a, argparse._HelpAction):
            yield path, a


@pytest.mark.quick
def test_every_cli_option_has_help_text():
    from novella_mlir.tools import demo

    parsers = ((cli._parser(), "novella"), (novella_opt._parser(), "novella-opt"), (demo.parser(), "novella demo"))
    missing = [f"{path} {a.dest}" for p, name in parsers for path, a in _actions(p, name) if not a.help]
    assert missing == []


@pytest.mark.quick
def test_demo_help_lists_its_options(capsys):
    assert cli.main(["demo", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: novella demo")
    for flag in ("--layers", "--lengths", "--dump-dir"):
        assert flag in out


@pytest.mark.quick
def test_demo_refuses_a_length_outside_its_range(capsys):
    assert cli.main(["demo", "--lengths", "1,5"]) == 2
    assert "every length must be in [2, 3000]" in capsys.readouterr().err


@pytest.mark.quick
def test_numba_notice_until_the_kernels_are_cached(tmp_path, monkeypatch, capsys):
    import importlib.util

    from simulator import first_build

    src = tmp_path / "fresh_kernels.py"
    src.write_text("import numba\n\n@numba.njit(cache=True)\ndef inc(x):\n    return x + 1\n")
    spec = importlib.util.spec_from_file_location("fresh_kernels", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert first_build.uncached(mod) == ["inc"]
    monkeypatch.setenv("NOVELLA_PROGRESS", "0")
    first_build.announce(mod)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(first_build, "_ANNOUNCED", set())
    monkeypatch.setenv("NOVELLA_PROGRESS", "1")
    first_build.announce(mod)
    first_build.announce(mod)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "compiling 1 numba kernels of fresh_kernels (first run" in err
    assert mod.inc(1) == 2
    assert first_build.uncached(mod) == []


@pytest.fixture(scope="module")
def demo_npu():
    pytest.importorskip("transformers")
    from novella_mlir.tools import demo

    model = demo.build(layers=1)
    return demo, model, demo.compile_encoder(model)


class _Off:
    """A compiled model whose output is wrong at one length (the rest is the real model)."""

    def __init__(self, npu, frames: int):
        self.npu, self.frames = npu, frames

    def __call__(self, x):
        y = self.npu(x)
        return y + 1.0 if x.shape[2] == self.frames else y

    def __getattr__(self, name):
        return getattr(self.npu, name)


def test_demo_ends_with_a_verdict_and_fails_on_a_mismatch(demo_npu, monkeypatch, capsys):
    demo, model, npu = demo_npu
    monkeypatch.setattr(demo, "build", lambda layers: model)
    monkeypatch.setattr(demo, "compile_encoder", lambda m, **kw: npu)
    assert demo.main(["--lengths", "2,5"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("verdict: all 2 lengths match eager (max err ")
    assert "the compulsory roofline" in lines[-1] and "cyc/roof" in lines[1]
    monkeypatch.setattr(demo, "compile_encoder", lambda m, **kw: _Off(npu, 5))
    assert cli.main(["demo", "--lengths", "2,5"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("verdict: FAIL: 1 of 2 lengths differ from eager (T=5)")


def _mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16)).eval()


@pytest.mark.quick
def test_compile_shows_its_stages_on_a_terminal_only(monkeypatch, capsys):
    import torch

    from novella_mlir import compile_torch
    from novella_mlir.transforms.registry import BACKEND_PIPELINE

    monkeypatch.setenv("NOVELLA_PROGRESS", "0")
    compile_torch(_mlp(), torch.randn(1, 4, 16), max_len=64, cache=False)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("NOVELLA_PROGRESS", "1")
    npu = compile_torch(_mlp(), torch.randn(1, 4, 16), max_len=64, cache=False)
    err = capsys.readouterr().err
    assert f"/{len(BACKEND_PIPELINE) + 3} stages" in err and "compile: novella-schedule" in err
    assert npu.stages.bar is None


@pytest.mark.quick
def test_short_reprs():
    import torch

    from novella_mlir import compile_torch

    npu = compile_torch(_mlp(), torch.randn(1, 4, 16), max_len=64, cache=False, buckets=False)  # one program
    art = npu.artifact
    assert repr(art) == (
        f"<Artifact T in [1, 64]: 1 program, MacroMeta {art.macro_nbytes:,} B, TileMeta {art.tile_nbytes:,} B, "
        f"weights {art.weight_nbytes:,} B>"
    )
    assert repr(npu) == f"<CompiledModel {art!r}>"
    p = art.programs[0]
    assert repr(art.programs) == (
        f"[Program([1, 64], 'generic', {len(p.macros)} templates, {len(p.tiles)} tile rules, 1 inputs, 1 outputs)]"
    )


def test_generate_reports_tokens_per_second(monkeypatch, capsys):
    tf = pytest.importorskip("transformers")
    import torch

    from novella_mlir import compile_causal_lm

    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32)
    lm = compile_causal_lm(tf.GPT2LMHeadModel(cfg).eval(), max_len=32, page_size=16, cache=False)
    capsys.readouterr()
    monkeypatch.setenv("NOVELLA_PROGRESS", "0")
    lm.generate(torch.tensor([[3, 4, 5]]), max_new_tokens=4)
    assert capsys.readouterr().err == ""
    assert lm.last_run.tokens == 4 and lm.last_run.tokens_per_second > 0
    lm.generate([torch.tensor([3]), torch.tensor([4, 5])], max_new_tokens=3, progress=True)
    err = capsys.readouterr().err
    assert "generate" in err and "tok/s" in err and "6/6" in err
    assert lm.last_run.tokens == 6
