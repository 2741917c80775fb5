"""The package's layers: modules import only from their own layer or the ones below, and the
import graph (function-level imports included) has no cycle.

`LAYERS` is the declared order, lowest first; a module belongs to the layer of its longest
matching prefix. `KNOWN` lists the edges that still break the rules: none. An edge may be listed
only while it is being removed by moving code: the test fails on a new violation and on a listed
one that is gone (so the list stays exact).

The generic path (`frontend.linalg`) is declared above the lowerings: it builds its ops with their
helpers (`shape_ops.affine`, `elementwise.size_value`, `source_location`), and the lowerings reach it
only as the fallback the pipeline passes to `convert`. `compiled` (CompiledModel) sits below the
pipeline, causal_lm and decoding, which make and return compiled models."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("novella_mlir", "simulator")

LAYERS = [
    ("simulator",),
    ("novella_mlir.errors", "novella_mlir.artifact.limits"),
    (
        "novella_mlir.machine",
        "novella_mlir.symbolic",
        "novella_mlir.symbolic.periodic",
        "novella_mlir.symbolic.postfix",
        "novella_mlir.symbolic.division",
        "novella_mlir.symbolic.box",
        "novella_mlir.frontend.dtypes",
    ),
    ("novella_mlir.runtime", "novella_mlir.artifact.format", "novella_mlir.artifact.check", "novella_mlir.artifact"),
    ("novella_mlir.dialects",),
    ("novella_mlir.kernels",),
    ("novella_mlir.frontend.lowering",),
    ("novella_mlir.frontend.linalg",),
    ("novella_mlir.optable",),
    ("novella_mlir.transforms",),
    ("novella_mlir.frontend", "novella_mlir.artifact.extract"),
    ("novella_mlir.compiled",),
    ("novella_mlir.artifact.cache", "novella_mlir.pipeline", "novella_mlir.causal_lm", "novella_mlir.decoding"),
    ("novella_mlir.testing", "novella_mlir.tools", "novella_mlir"),
]

# (importer, imported) edges that break the layering or close a cycle today: none.
KNOWN: set[tuple[str, str]] = set()


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")[: None if is_package else -1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph() -> dict[str, set[str]]:
    mods = _modules()

    def known(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name

    graph = collections.defaultdict(set)
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(mod, path.name == "__init__.py", node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else known(base) for a in node.names]
            else:
                continue
            graph[mod].update(t for t in targets if t and t != mod and t.split(".")[0] in PACKAGES)
    return graph


def layer_of(module: str) -> int:
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)


def _upward(graph) -> set[tuple[str, str]]:
    return {(a, b) for a, bs in graph.items() for b in bs if layer_of(b) > layer_of(a)}


def _cycle_edges(graph) -> set[tuple[str, str]]:
    """Edges inside a strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while not comp or w != v:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
            comps.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return {(a, b) for comp in comps if len(comp) > 1 for a in comp for b in graph[a] if b in comp}


def test_every_module_has_a_layer():
    for mod in _modules():
        layer_of(mod)


def test_no_import_goes_up_a_layer():
    bad = _upward(import_graph())
    assert bad - KNOWN == set(), "imports that go up a layer (move the code down, or declare the layer)"


def test_no_import_cycle_beyond_the_known_edges():
    graph = import_graph()
    for a, b in KNOWN:
        graph[a].discard(b)
    assert _cycle_edges(graph) == set(), "an import cycle (a function-level import counts)"


def test_known_violations_are_still_real():
    graph = import_graph()
    gone = {(a, b) for a, b in KNOWN if b not in graph.get(a, ())}
    assert gone == set(), "these edges are gone: remove them from KNOWN"
    upward, cyclic = _upward(graph), _cycle_edges(graph)
    assert {e for e in KNOWN if e not in upward and e not in cyclic} == set(), "listed edges that break no rule"


def test_loading_a_compiled_model_needs_no_mlir():
    """`novella_mlir.load` and `CompiledModel` (compiled.py) run an artifact without the compiler's MLIR."""
    import subprocess
    import sys

    code = "import sys, novella_mlir; novella_mlir.load; assert 'torch_mlir' not in sys.modules, 'MLIR imported'"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
