"""The model zoo: every transformers family of the installed version that builds from a small config
(bench/zoo_models.py), compiled once from its smallest length and checked against eager at five
lengths, without and (text models) with an attention mask. Writes docs/zoo.md.

    .venv/bin/python bench/zoo.py [--families gpt2,bert] [--timeout 600] [--out docs/zoo.md]

A survey subprocess builds every family of MODEL_MAPPING_NAMES (composite configs and families
without a length-dynamic input are listed as skipped); each buildable family then runs in its own
subprocess with a timeout, so a hang or a crash costs one line, not the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MAX_LEN = 128
TOL = 1e-4
DIM = {"input_ids": 1, "input_values": 1, "input_features": 2, "pixel_values": 3}


def _alarm(seconds: int):
    def on_alarm(*_):
        raise TimeoutError(f"no answer in {seconds} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)


def _why(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def _min_length(model, name, cfg, hi: int) -> int:
    """The smallest length eager accepts (1, 2, 3, 4, then doubling, then bisected)."""
    import torch
    import zoo_models as zm

    def ok(n):
        try:
            with torch.no_grad():
                model(zm.make_input(name, cfg, n, 0))
            return True
        except Exception:
            return False

    bad, n = 0, 1
    while n <= hi and not ok(n):
        bad, n = n, (n + 1 if n < 4 else 2 * n)
    if n > hi:
        raise LookupError(f"eager rejects every length up to {hi}")
    while n - bad > 1:
        mid = (bad + n) // 2
        bad, n = (bad, mid) if ok(mid) else (mid, n)
    return n


def survey(names: list[str], max_len: int, per_family: int = 60) -> list[dict]:
    """Builds each family and finds its length range; one dict per family."""
    import logging
    import warnings

    import torch
    import zoo_models as zm

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    rows = []
    for fam in names:
        row = {"family": fam}
        try:
            _alarm(per_family)
            torch.manual_seed(0)
            model, name, cfg = zm.build(fam, 2 * max_len + 64)
            hi = {"input_values": 400 + 320 * (max_len // 2), "pixel_values": 4 * getattr(cfg, "image_size", 32)}
            hi = hi.get(name, max_len)
            lo = _min_length(model, name, cfg, hi)
            if _min_length(model, name, cfg, hi) != lo or not _varies(model, name, cfg, lo, hi):
                raise LookupError("eager takes one length only")
            row.update(kind=name, lo=lo, hi=hi, mask=name == "input_ids" and _takes_mask(model, cfg, lo))
            if step := _patch_step(model, name, cfg, lo, hi):  # torch.export keeps a Dim symbolic from 2
                row.update(step=step, lo=max(lo, 2 * step), hi=hi - hi % step)
        except Exception as e:  # noqa: BLE001 - a family that does not build is a row, not a stop
            row["skip"] = _why(e)
        finally:
            signal.alarm(0)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def _varies(model, name, cfg, lo, hi) -> bool:
    import torch
    import zoo_models as zm

    try:
        with torch.no_grad():
            model(zm.make_input(name, cfg, hi, 0))
        return True
    except Exception:
        return False


def _patch_step(model, name, cfg, lo, hi) -> int:
    """The config's patch size p when eager takes only widths that are multiples of it (a patch grid
    reshaped from the pixels, radio's, not a strided conv that drops the rest): the width is then
    `p * Dim("k")` (0 otherwise)."""
    p = getattr(cfg, "patch_size", None)
    if name != "pixel_values" or not isinstance(p, int) or p < 2 or lo % p or max(lo, 2 * p) + p > hi:
        return 0
    return p if not _varies(model, name, cfg, lo, lo + 1) and _varies(model, name, cfg, lo, lo + p) else 0


def _takes_mask(model, cfg, lo) -> bool:
    import torch
    import zoo_models as zm

    n = max(lo, 8)
    try:
        with torch.no_grad():
            model(zm.make_input("input_ids", cfg, n, 0), zm.make_mask(n))
        return True
    except Exception:
        return False


def lengths(kind: str, lo: int, hi: int, step: int = 1) -> list[int]:
    """min, 2 (or min + 1), an odd middle, a partial last tile (67 rows of 64), max; with a `step`,
    those multiples of it (k = min, min + 1, an odd middle, ..., max patches)."""
    if step > 1:
        return [k * step for k in lengths("", lo // step, hi // step)]
    if kind == "input_ids":
        cand = [lo, max(lo + 1, 2), 37, 67, hi]
    else:
        mid = (lo + hi) // 2 | 1
        cand = [lo, lo + 1, mid, hi - (hi - lo) // 3, hi]
    return sorted({n for n in cand if lo <= n <= hi})


def check_one(row: dict, with_mask: bool) -> dict:
    """Compiles the family once over [lo, hi] and compares it with eager at every length."""
    import torch
    import zoo_models as zm

    from novella_mlir import compile_torch
    from novella_mlir.errors import NovellaError

    torch.manual_seed(0)
    model, name, cfg = zm.build(row["family"], 2 * MAX_LEN + 64)
    lo, hi, step = row["lo"], row["hi"], row.get("step", 1)
    ex_len = min(max(lo, 16), hi) if name == "input_ids" else lo + (hi - lo) // 4
    ex_len = max(ex_len - ex_len % step, lo + step) if step > 1 else ex_len  # not k's bound: torch fixes it there
    args = lambda n, s: (zm.make_input(name, cfg, n, s),) + ((zm.make_mask(n),) if with_mask else ())  # noqa: E731
    res = {"compile_s": None, "err": None, "refusal": None, "lengths": []}
    t0 = time.perf_counter()
    try:
        npu = compile_torch(model, *args(ex_len, 0), dynamic_dim=DIM[name], min_len=lo, max_len=hi,
                            dynamic_shapes=_shapes(name, lo, hi, step), cache=False, buckets=False)  # fmt: skip
    except NovellaError as e:
        return res | {"refusal": _why(e), "stage": "compile"}
    except Exception as e:  # noqa: BLE001 - reported as a crash: the compiler must refuse, not raise this
        return res | {"refusal": _why(e), "stage": "crash"}
    res["compile_s"] = round(time.perf_counter() - t0, 1)
    worst = 0.0
    for n in lengths(name, lo, hi, step):
        a = args(n, 5)
        with torch.no_grad():
            ref = model(*a)
        try:
            y = npu(*a, check_hazards=False)
        except Exception as e:  # noqa: BLE001
            return res | {"refusal": f"at length {n}: {_why(e)}", "stage": "run", "err": worst}
        err = (y - ref).abs().max().item() if y.shape == ref.shape else float("inf")
        ok = y.shape == ref.shape and torch.allclose(y, ref, atol=TOL, rtol=TOL)
        worst = max(worst, err)
        res["lengths"].append([n, err, bool(ok)])
    return res | {"err": worst, "stage": "ok" if all(ok for _, _, ok in res["lengths"]) else "wrong"}


def _shapes(name: str, lo: int, hi: int, step: int):
    """torch.export's spec when the length is `step * Dim("k")` (a patch grid), else None (`dynamic_dim`)."""
    if step == 1:
        return None
    from torch.export import Dim

    k = Dim("k", min=lo // step, max=hi // step)
    return {"x": {DIM[name]: step * k}}


def child(args) -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    row = json.loads(args.one)
    out = {"nomask": check_one(row, False)}
    print("RESULT " + json.dumps(out), flush=True)  # kept if the masked run times out
    if row.get("mask"):
        out["masked"] = check_one(row, True)
        print("RESULT " + json.dumps(out), flush=True)


def _spawn(argv: list[str], timeout: int) -> tuple[str, str]:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{HERE}", NOVELLA_CACHE="0")
    try:
        p = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, timeout=timeout,
                           env=env, cwd=HERE)  # fmt: skip
        return p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "TIMEOUT"


def run_survey(names: list[str] | None, timeout: int) -> list[dict]:
    import zoo_models as zm

    todo = names or zm.families()
    rows, done = [], set()
    while len(done) < len(todo):
        left = [f for f in todo if f not in done]
        out, err = _spawn(["--survey", ",".join(left)], timeout)
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if not got:  # the first family left hung or crashed the survey
            got = [{"family": left[0], "skip": "survey " + ("timed out" if err == "TIMEOUT" else "crashed")}]
        for r in got:
            done.add(r["family"])
            rows.append(r)
    return rows


def run_family(row: dict, timeout: int) -> dict:
    t0 = time.perf_counter()
    out, err = _spawn(["--one", json.dumps(row)], timeout)
    lines = [x for x in out.splitlines() if x.startswith("RESULT ")]
    stage = "timeout" if err == "TIMEOUT" else "crash"
    tail = f"timed out after {timeout} s" if err == "TIMEOUT" else (err.strip().splitlines() or ["?"])[-1]
    lost = {"stage": stage, "refusal": f"subprocess: {tail[:300]}"}
    got = json.loads(lines[-1][7:]) if lines else {"nomask": lost}
    if row.get("mask") and "masked" not in got:
        got["masked"] = lost
    return row | got | {"wall_s": round(time.perf_counter() - t0), "commit": _commit()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="", help="comma-separated model types (default: all)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per family")
    p.add_argument("--survey-file", default="/tmp/zoo_survey.json", help="reuse a survey if it exists")
    p.add_argument("--results", default="/tmp/zoo_results.json", help="results so far (resumed)")
    p.add_argument("--out", default=str(ROOT / "docs" / "zoo.md"))
    p.add_argument("--budget", type=float, default=1e9, help="minutes: start no family after this")
    p.add_argument("--render", action="store_true", help="only write the table from the results so far")
    p.add_argument("--merge", action="store_true", help="replace only the run families' rows of --out")
    p.add_argument("--jobs", type=int, default=1, help="families run at once (each in its own subprocess)")
    p.add_argument("--survey", help=argparse.SUPPRESS)
    p.add_argument("--one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.survey:
        survey(args.survey.split(","), MAX_LEN)
        return
    if args.one:
        child(args)
        return
    names = [f for f in args.families.split(",") if f] or None
    sf = Path(args.survey_file)
    rows = json.loads(sf.read_text()) if sf.exists() else []
    have = {r["family"] for r in rows}
    need = [f for f in names if f not in have] if names else (None if not rows else [])
    if need is None or need:
        rows += run_survey(need, 1800)
        sf.write_text(json.dumps(rows))
    rf = Path(args.results)
    results = {r["family"]: r for r in (json.loads(rf.read_text()) if rf.exists() else [])}
    stop = time.monotonic() + 60 * (0 if args.render else args.budget)
    todo = [r for r in interleaved(rows) if "skip" not in r and r["family"] not in results]
    todo = [r for r in todo if not names or r["family"] in names]

    def one(r):
        if time.monotonic() > stop:
            return
        results[r["family"]] = res = run_family(r, args.timeout)
        print(line_of(res), flush=True)
        rf.write_text(json.dumps(list(results.values())))

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))
    if not args.render and len(results) < len(rows) - sum("skip" in r for r in rows):
        print(f"budget of {args.budget} min spent: the families left are not in the table")
    import zoo_report

    if args.merge:
        ran = {f: r for f, r in results.items() if not names or f in names}
        text = zoo_report.merge(Path(args.out).read_text(), ran, _machine)
    else:
        text = zoo_report.render(rows, results, _machine(sorted({r.get("commit", "?") for r in results.values()})))
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


def interleaved(rows: list[dict]) -> list[dict]:
    """The families alternating between input kinds (text, audio, vision), each kind alphabetical, so a
    partial run covers every kind."""
    by_kind: dict[str, list] = {}
    for r in rows:
        by_kind.setdefault(r.get("kind", ""), []).append(r)
    out, queues = [], list(by_kind.values())
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def _commit() -> str:
    """The commit the families run from: ZOO_COMMIT (a run from an exported copy of the tree), else HEAD."""
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return os.environ.get("ZOO_COMMIT") or rev.stdout.strip()


def _machine(commits: list[str]) -> str:
    commit = (
        f"commit {commits[0]}"
        if len(commits) == 1
        else f"rows from commits {', '.join(commits)} (each row's last cell)"
    )
    import torch
    import transformers

    return (f"{commit}, {platform.node()} ({platform.machine()}, {os.cpu_count()} cores), "
            f"Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}")  # fmt: skip


def line_of(r: dict) -> str:
    import zoo_report

    return zoo_report.line(r)


if __name__ == "__main__":
    main()
