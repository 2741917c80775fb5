"""The linear cost model prices what the emitter writes (issue 23): the epilogue's and the prologue's LOADs,
VECs and STORE are read from `emit_epilogue`, `emit_spread_epilogue` and `emit_prologue` run into a
`linear_emit.Trace`, so a change to an emitter changes the predicted cycles with no second list to edit."""

from __future__ import annotations

from novella_mlir.kernels import elementwise, forget, linear, linear_cost, linear_emit
from novella_mlir.machine.target import Target
from simulator import load_config

VEC, LOAD, STORE = linear_cost.VEC, linear_cost.LOAD, linear_cost.STORE


def _fns(ops, kind=VEC):
    return [op.fn for op in ops if op.kind == kind]


def test_the_trace_reads_the_emitted_epilogue():
    forget()
    gelu = linear_cost.Epilogue("gelu", residual=True)
    ops = linear_cost.emitted(gelu, 16, 128, 384, 0, (False, True))
    assert _fns(ops) == ["ADD", "MUL", "ERF", "ADD", "MUL", "MUL", "ADD"]  # bias, GELU, residual
    loads = [(op.rows, op.cols, op.contiguous) for op in ops if op.kind == LOAD]
    assert loads == [(16, 128, False), (1, 128, False)]  # the residual block and the bias tile: rows 384 apart
    assert [(op.rows, op.cols, op.contiguous) for op in ops if op.kind == STORE] == [(16, 128, False)]
    whole = linear_cost.emitted(linear_cost.Epilogue("none", norm=True), 8, 256, 256, 0, (False, False))
    assert [op.cols for op in whole if op.kind == VEC][:3] == [
        256,
        256,
        8,
    ]  # bias add, row sum, the mean's DIV (its 8 rows as one row)
    assert all(op.contiguous for op in whole if op.kind == STORE)  # whole rows: one run


def test_a_spread_epilogue_is_priced_at_the_k_step_it_runs():
    forget()
    ops = linear_cost.emitted(linear_cost.Epilogue("gelu"), 16, 128, 384, 3, (False, False))
    by_step = [_fns([op for op in ops if op.on({2: j})]) for j in range(3)]
    assert by_step == [["ADD", "MUL"], ["ERF", "ADD"], ["MUL", "MUL"]]  # linear_emit.spread_steps(6, 3)
    assert [op.on({2: 2}) for op in ops if op.kind == STORE] == [True]
    assert not [op for op in ops if op.kind == STORE and op.on({2: 0})]


def test_the_prologue_runs_on_the_first_step_input_stationary():
    forget()
    slab = linear_cost.emitted_prologue(16, 64, 32, 2)[0]
    assert [(op.rows, op.cols) for op in slab if op.kind == LOAD] == [(1, 64), (1, 64)]  # the norm's w and b
    first, later = ({0: 0, 1: 0, 2: 0}, {2: 1})
    assert len([op for op in slab if op.kind == VEC and op.on(first)]) == 14  # the squares summed in two chunks of 32
    assert not [op for op in slab if op.on(later)]
    streamed = linear_cost.emitted_prologue(16, 64, 64, 0)[0]
    assert len([op for op in streamed if op.kind == VEC and op.on(later)]) == 11  # on every step, one chunk


def test_an_emitter_change_moves_the_price(monkeypatch):
    """One more VEC in the GELU emitter (no cost-model edit) costs its cycles in the prediction."""
    target = Target.from_config(load_config())
    dims, cand = (256, 384, 1536, linear_cost.Epilogue("gelu")), (128, 128, 384, 0, 1, 0, 0, 0)
    forget()
    before = linear.Linear().cost(target, dims, cand)
    emit_act = elementwise.emit_act

    def one_more(b, act, buf, tmp, rows, cols, stride, when=None, out=None):
        emit_act(b, act, buf, tmp, rows, cols, stride, when=when, out=out)
        b.vop("ERF", tmp, tmp, rows=rows, cols=cols, dst_stride=stride, a_stride=stride, when=when)

    monkeypatch.setattr(linear_emit, "emit_act", one_more)
    forget()
    after = linear.Linear().cost(target, dims, cand)
    forget()
    assert after > before + 12 * linear_cost.cm.vec(target, 128, 128, "erf") * 0.9  # 2 x 12 output blocks


def test_the_step_body_is_traced_once_per_class_and_sized_by_its_rows():
    """`emitted_body` at any rows (a tm of the search, a partial last tile) is what the emitters write at
    those rows, though the body is traced only at one row and two per class (`body_class`); the rows that
    size it are the x tile's, the residual block's and the MATMUL's m, never the weight tile's or the bias'."""
    forget()
    epis = (
        linear_cost.Epilogue("gelu", residual=True, norm=True),
        linear_cost.Epilogue("none", residual=True),
        linear_cost.Epilogue("none", pre_norm=True, rms=True),
    )
    for epi in epis:
        for tiles in (
            (32, 16, 0, 1, 0, 0, 0),
            (32, 16, 1, 2, 1, 0, 3),
            (64, 32, 2, 3, 0, 1, 0),
            (48, 80, 1, 1, 1, 1, 3),
        ):
            for r in (1, 7, 16, 64, 300):
                body = linear_cost.emitted_body(epi, r, 80, 384, tiles)
                assert body == linear_cost._body_trace(epi, r, 80, 384, linear_cost._geometry(tiles)), (epi, tiles, r)
                sized = {op.buffer for op in body if op.kind == LOAD and op.rows == r}
                want = {"a", "acc"} if tiles[4] else {"a"}
                assert r not in (7, 300) or sized == want, (tiles, r)
