"""novella-opt internals, the `novella` CLI, the dumped IR and the plots."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.tools import cli, novella_opt, plots
from novella_mlir.tools import diagnostics as dg
from novella_mlir.tools.inspect_artifact import infix
from novella_mlir.tools.pass_pipeline import PipelineError, parse_option_string, parse_pipeline
from novella_mlir.transforms.registry import BACKEND_PIPELINE

FACTORY = """
import torch

def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 32))

def not_a_module():
    return 3
"""


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    out = tmp_path_factory.mktemp("dump")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32)).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, max_len=256, dump_dir=out)
    return out, npu


# ------------------------------------------------------------------ pipelines and diagnostics


def test_parse_pipeline_with_options():
    items = parse_pipeline("builtin.module(novella-allocate, novella-tile{tile-m=32}, canonicalize, func.func(cse))")
    assert [i.name for i in items] == ["novella-allocate", "novella-tile", "canonicalize", "func.func"]
    assert items[1].options == {"tile-m": 32, "slots": 2}
    assert items[3].text == "func.func(cse)" and not items[3].is_novella
    assert parse_pipeline("novella-tile")[0].options == {"tile-m": 0, "slots": 2}


@pytest.mark.parametrize(
    ("text", "col", "message"),
    [
        ("builtin.module(novella-tile{tile-m=x})", 29, "expects int"),
        ("builtin.module(novella-tile{depth=3})", 29, "has no option 'depth'"),
        ("builtin.module(novella-tile{tile-m})", 29, "expected 'name=value'"),
        ("builtin.module(novella-tile,)", 29, "expected a pass name"),
        ("func.func(novella-tile)", 1, "anchored on 'builtin.module'"),
    ],
)
def test_pipeline_errors_have_columns(text, col, message):
    with pytest.raises(PipelineError) as e:
        parse_pipeline(text)
    assert e.value.col == col and message in e.value.message


def test_option_string_quotes_and_braces():
    assert parse_option_string("{a=1 b='x y' c={1,2}}") == {"a": "1", "b": "x y", "c": "{1,2}"}


def test_expectations_relative_lines():
    src = dg.Source(
        "f.mlir",
        "a\n// expected-error @above {{one}}\n// expected-note@+2 {{two}}\nb\nc\n// expected-warning {{three}}",
    )
    ex = dg.expectations(src, 1, 6)
    assert [(x.severity, x.line, x.pattern) for x in ex] == [
        ("error", 1, "one"),
        ("note", 5, "two"),
        ("warning", 6, "three"),
    ]


def test_verify_reports_both_directions():
    src = dg.Source("f.mlir", "x\n// expected-error @above {{want}}")
    diags = [dg.Diag("error", "f.mlir", 1, 3, "got this instead")]
    errors = dg.verify(diags, dg.expectations(src, 1, 2))
    assert errors == [
        "f.mlir:1:3: error: unexpected error: got this instead",
        'f.mlir:2:4: error: expected error "want" was not produced',
    ]


def test_novella_opt_never_tracebacks(tmp_path, capsys):
    bad = tmp_path / "bad.mlir"
    bad.write_text('func.func @f() {\n  %0 = "novella.weight"() {name = "w"} : () -> tensor<?x4xf32>\n  return\n}\n')
    assert novella_opt.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2:8: error: 'novella.weight' op weight must have a static shape" in err
    assert "Traceback" not in err


def test_novella_opt_output_file_and_stdin(tmp_path, monkeypatch, capsys):
    src = "func.func @f() {\n  return\n}\n// -----\nfunc.func @g() {\n  return\n}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(src))
    out = tmp_path / "out.mlir"
    assert novella_opt.main(["--split-input-file", "-o", str(out)]) == 0
    text = out.read_text()
    assert "@f" in text and "@g" in text and text.count("// -----") == 1
    assert capsys.readouterr().out == ""


# ------------------------------------------------------------------ dumps


def test_every_dumped_stage_parses_with_novella_opt(dumped, capsys):
    out, _ = dumped
    files = sorted(out.glob("*.mlir"))
    assert [f.stem.split("-", 1)[1] for f in files] == ["torch", "novella", *BACKEND_PIPELINE]
    for f in files:
        assert novella_opt.main([str(f), "-o", str(out / "reparsed.txt")]) == 0, capsys.readouterr().err


def test_novella_opt_reproduces_each_stage_from_the_previous(dumped, capsys):
    out, _ = dumped
    files = sorted(out.glob("*.mlir"))[1:]
    for prev, cur in zip(files, files[1:]):
        flag = cur.stem.split("-", 1)[1]
        result = out / f"{flag}.again"
        assert novella_opt.main([str(prev), f"--{flag}", "-o", str(result)]) == 0, capsys.readouterr().err
        assert result.read_text() == cur.read_text(), flag


# ------------------------------------------------------------------ novella CLI


@pytest.fixture(scope="module")
def factory(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "models.py"
    path.write_text(FACTORY)
    return path


def test_cli_compile_run_inspect(factory, tmp_path, capsys):
    model = tmp_path / "m.nvla"
    argv = [
        "compile",
        f"{factory}:build",
        "--example-shape",
        "1,16,32",
        "--dynamic-dim",
        "1",
        "--min-len",
        "2",
        "--max-len",
        "300",
        "--pass-option",
        "novella-tile:tile-m=32",
        "--pass-option",
        "novella-fuse:fuse-mlp=0",  # the linears' grids below (a short bucket would fuse them)
        "-o",
        str(model),
    ]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "[3/3] wrote" in captured.err and "novella-tile" in captured.err
    assert model.exists()
    assert cli.main(["inspect", str(model)]) == 0
    text = capsys.readouterr().out
    assert "T in [2, 300]" in text and "input 0: [1, T, 32]" in text
    assert "grid [1, T ceildiv 32, 1]" in text and "rows=min(32, T - 32 * d1)" in text
    assert "MacroMeta (templates)" in text and "spad_bytes = 262144" in text
    assert cli.main(["run", str(model), "--len", "T=45"]) == 0
    out = capsys.readouterr().out
    assert "inputs [[1, 45, 32]] -> outputs [[1, 45, 32]]" in out and "MAC utilization" in out
    assert cli.main(["run", str(model), "--len", "301"]) == 1
    assert "outside the compiled bounds [2, 300]" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nomodule_xyz:build", "importing 'nomodule_xyz' failed: ModuleNotFoundError"),
        ("{factory}:missing", "has no attribute 'missing'"),
        ("{factory}:not_a_module", "returned int, expected a torch.nn.Module"),
        ("nocolon", "expected MODULE:FACTORY"),
    ],
)
def test_cli_compile_errors(factory, tmp_path, capsys, target, message):
    argv = ["compile", target.format(factory=factory), "--example-shape", "1,4,32", "-o", str(tmp_path / "x.nvla")]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_run_rejects_bad_artifact(tmp_path, capsys):
    junk = tmp_path / "junk.nvla"
    junk.write_bytes(b"not an artifact")
    assert cli.main(["run", str(junk), "--len", "4"]) == 1
    assert "bad magic" in capsys.readouterr().err


def test_cli_demo_runs_the_installed_module(monkeypatch, tmp_path, capsys):
    import types

    import novella_mlir

    assert Path(cli.demo_module().__file__).parent == Path(novella_mlir.__file__).parent / "tools"
    planted = tmp_path / "examples" / "whisper_encoder.py"
    planted.parent.mkdir()
    planted.write_text("raise SystemExit('planted file ran')\n")
    monkeypatch.chdir(tmp_path)
    fake = types.SimpleNamespace(main=lambda argv, prog=None: print("demo ran with", argv) or 0)
    monkeypatch.setattr(cli, "demo_module", lambda: fake)
    assert cli.main(["demo", "--len", "7"]) == 0
    assert "demo ran with ['--len', '7']" in capsys.readouterr().out


def test_infix_rendering():
    assert infix(["s0", 64, "ceildiv"], ["T"]) == "T ceildiv 64"
    assert infix(["d1", -64, "*", "s0", "+"], ["T"]) == "T - 64 * d1"
    assert infix(["s0", 1, "+", 2, "floordiv"], ["T"]) == "(T + 1) floordiv 2"


# ------------------------------------------------------------------ plots


def test_words_vs_length_plots_each_mode():
    lengths = [1, 100, 1000]
    series = {"static": [9000, 9000, 9000], "per-length": [19, 330, 3300], "jit": [120, 120, 120]}
    fig = plots.words_vs_length(lengths, series)
    lines = fig.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == list(series)
    for ln, values in zip(lines, series.values()):
        np.testing.assert_array_equal(ln.get_ydata(), values)
    assert fig.axes[0].get_yscale() == "log"
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue()[:4] == b"\x89PNG"


def test_cycles_and_roofline_plots(dumped):
    _, npu = dumped
    lengths, stats = [8, 64, 200], []
    for n in lengths:
        npu(torch.randn(1, n, 32))
        stats.append(npu.last_run.stats)
    fig = plots.cycles_vs_length(lengths, [s.cycles for s in stats], roofline=[s.roofline_cycles for s in stats])
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [s.cycles for s in stats]
    cfg = npu.config
    fig = plots.roofline(
        stats,
        [f"T={n}" for n in lengths],
        macs_per_cycle=cfg.macs_per_cycle,
        dram_bytes_per_cycle=cfg.dram_bytes_per_cycle,
    )
    points = np.concatenate([c.get_offsets() for c in fig.axes[0].collections])
    np.testing.assert_allclose(points[:, 1], [s.macs / s.cycles for s in stats])
    assert all(s.macs / s.cycles <= cfg.macs_per_cycle for s in stats)
    fig = plots.utilization_vs_length(lengths, [s.to_dict() for s in stats])
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), [s.mac_utilization for s in stats])


def test_novella_opt_internal_error_is_a_diagnostic(tmp_path, monkeypatch, capsys):
    src = tmp_path / "ok.mlir"
    src.write_text("func.func @f() {\n  return\n}\n")

    def boom(self, ctx):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(novella_opt.Opt, "pass_manager", boom)
    assert novella_opt.main([str(src), "--novella-legalize"]) == 1
    err = capsys.readouterr().err
    assert f"{src}:1:1: error: internal error while processing this input: RuntimeError: kaboom" in err
    assert "Traceback" not in err


def test_cli_run_inspect_a_two_symbol_artifact_with_a_t_1_program(tmp_path, capsys):
    from torch.export import Dim

    class BranchOnT(torch.nn.Module):
        def forward(self, x, y):
            if x.shape[1] > 1:
                return x * 2.0 + y.sum(1, keepdim=True)
            return x + 1.0

    spec = {"x": {1: Dim("T", min=1, max=64)}, "y": {1: Dim("S", min=1, max=64)}}
    npu = compile_torch(BranchOnT(), torch.randn(1, 8, 4), torch.randn(1, 5, 4), dynamic_shapes=spec, cache=False)
    model = tmp_path / "two.nvla"
    npu.save(model)
    assert cli.main(["inspect", str(model)]) == 0
    text = capsys.readouterr().out
    assert "T in [1, 1], S in [1, 64]" in text and "T in [2, 64], S in [1, 64]" in text
    for lens, shape in (("T=1,S=7", "[1, 1, 4]"), ("T=2,S=1", "[1, 2, 4]"), ("T=63,S=64", "[1, 63, 4]")):
        assert cli.main(["run", str(model), "--len", lens]) == 0
        assert f"-> outputs [{shape}]" in capsys.readouterr().out
