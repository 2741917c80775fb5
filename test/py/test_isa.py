"""ISA encoding tests: round-trips, range errors, and docs/isa.md vs LAYOUT."""

import re
from pathlib import Path

import numpy as np
import pytest

from simulator.isa import (
    FLOAT_FIELDS,
    LAYOUT,
    QUEUE_OF,
    WORD_BITS,
    EncodingError,
    Field,
    Opcode,
    VecFn,
    decode,
    decode_program,
    disassemble,
    encode,
    encode_batch,
    field,
    opcodes,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "isa.md"
RNG = np.random.default_rng(1234)


def _random_fields(op: Opcode, n: int) -> dict[str, np.ndarray]:
    out = {}
    for f in LAYOUT[op][1:]:
        if f.name in FLOAT_FIELDS:
            out[f.name] = RNG.standard_normal(n).astype(np.float32) * 1e3
        else:
            out[f.name] = RNG.integers(f.lo, f.hi, size=n, endpoint=True)
    return out


def test_layout_fields_fit_and_do_not_overlap():
    for op, fields in LAYOUT.items():
        used = np.zeros(WORD_BITS, dtype=int)
        for f in fields:
            assert 0 <= f.offset and f.offset + f.bits <= 64, (op, f)
            used[f.lane * 64 + f.offset : f.lane * 64 + f.offset + f.bits] += 1
        assert used.max() == 1, op
        assert fields[0] == Field("opcode", 0, 0, 4)


@pytest.mark.parametrize("op", list(Opcode))
def test_round_trip_random_fields(op):
    n = 200
    fields = _random_fields(op, n)
    batch = encode_batch(op, n, fields)
    assert batch.shape == (n, 4) and batch.dtype == np.uint64
    for i in range(n):
        one = {k: v[i].item() for k, v in fields.items()}
        word = encode(op, **one)
        np.testing.assert_array_equal(word, batch[i])
        inst = decode(word)
        assert inst.opcode == op and inst.queue == QUEUE_OF[op]
        assert inst.mnemonic == op.name
        assert inst.fields == one
    assert [x.fields for x in decode_program(batch)] == [decode(w).fields for w in batch]


@pytest.mark.parametrize("op", list(Opcode))
def test_field_accessor_reads_and_writes_what_decode_sees(op):
    """`field(op, name).get/put` (the accessor every packer outside the ISA module uses) agrees with
    encode/decode on random words, and `put` leaves every other field alone."""
    n = 64
    fields = _random_fields(op, n)
    words = encode_batch(op, n, fields)
    np.testing.assert_array_equal(opcodes(words), np.full(n, int(op)))
    for f in LAYOUT[op][1:]:
        if f.name in FLOAT_FIELDS:
            continue
        np.testing.assert_array_equal(field(op, f.name).get(words), fields[f.name])
        new = RNG.integers(f.lo, f.hi, size=n, endpoint=True)
        w = words.copy()
        field(op, f.name).put(w, new)
        want = [{**decode(x).fields, f.name: int(v)} for x, v in zip(words, new)]
        assert [decode(x).fields for x in w] == want
    with pytest.raises(EncodingError, match="unknown field"):
        field(op, "no_such_field")


def test_field_extremes_round_trip():
    for op, fields in LAYOUT.items():
        for pick in ("lo", "hi"):
            vals = {f.name: getattr(f, pick) for f in fields[1:] if f.name != "imm"}
            assert decode(encode(op, **vals)).fields == {
                **vals,
                **({"imm": 0.0} if op == Opcode.VEC else {}),
            }


def test_signed_row_start_is_twos_complement():
    word = encode(Opcode.LOAD, row_start=-1)
    f = next(f for f in LAYOUT[Opcode.LOAD] if f.name == "row_start")
    assert (int(word[f.lane]) >> f.offset) & f.mask == f.mask
    assert decode(word)["row_start"] == -1
    batch = encode_batch(Opcode.STORE, 3, {"row_start": np.array([-5, 0, -(1 << 23)])})
    assert [decode(w)["row_start"] for w in batch] == [-5, 0, -(1 << 23)]


def test_imm_is_float32_exact():
    for value in (0.1, -3.5, 1e-30, float("inf"), 3.4e38):
        got = decode(encode(Opcode.VEC, imm=value))["imm"]
        assert got == float(np.float32(value))
    nan = decode(encode(Opcode.VEC, imm=float("nan")))["imm"]
    assert np.isnan(nan)


def test_missing_fields_are_zero():
    inst = decode(encode(Opcode.MATMUL, m=3))
    assert inst["m"] == 3 and all(v == 0 for k, v in inst.fields.items() if k != "m")


@pytest.mark.parametrize(
    ("op", "name", "value"),
    [
        (Opcode.LOAD, "rows", 4096),
        (Opcode.LOAD, "row_start", 1 << 23),
        (Opcode.LOAD, "row_start", -(1 << 23) - 1),
        (Opcode.STORE, "dram_base", -1),
        (Opcode.MATMUL, "acc_addr", 1 << 16),
        (Opcode.VEC, "fn", 32),
        (Opcode.NOP, "pop_prev", 2),
    ],
)
def test_out_of_range_raises(op, name, value):
    with pytest.raises(EncodingError, match=rf"{op.name}.*{name}.*{value}"):
        encode(op, **{name: value})
    with pytest.raises(EncodingError, match=rf"{op.name}.*{name}.*{value}"):
        encode_batch(op, 3, {name: np.array([0, value, 0])})


def test_unknown_field_and_opcode():
    with pytest.raises(EncodingError, match="unknown field 'k'"):
        encode(Opcode.LOAD, k=1)
    with pytest.raises(EncodingError, match="unknown opcode 9"):
        decode(np.array([9, 0, 0, 0], dtype=np.uint64))
    with pytest.raises(EncodingError, match="integers"):
        encode_batch(Opcode.LOAD, 2, {"rows": np.array([1.5, 2.0])})


def test_disassemble():
    word = encode(
        Opcode.LOAD,
        sram_stride=64,
        dram_base=4096,
        dram_stride=64,
        rows=64,
        row_step=1,
        row_bound=100,
        cols=64,
        pop_next=1,
        push_next=1,
    )
    expect = "LOAD  spad[0 +64] <- dram[4096 +64] rows=64/step1 start=0 bound=100 cols=64  [pop_next push_next]"
    assert disassemble(word[None]) == expect
    prog = np.stack([word, encode(Opcode.VEC, fn=VecFn.EXP), encode(Opcode.NOP)])
    lines = disassemble(prog).splitlines()
    assert len(lines) == 3 and lines[1].startswith("VEC   EXP") and lines[2] == "NOP"


def _doc_tables() -> dict[str, list[Field]]:
    tables, current = {}, None
    for line in DOC.read_text().splitlines():
        m = re.match(r"<!-- layout: (\w+) -->", line.strip())
        if m:
            current = tables.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        if not line.startswith("|"):
            if current:
                current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "Field" or set(cells[0]) <= set("-:"):
            continue
        name, lane, offset, bits, signed = cells[:5]
        assert signed in ("yes", "no"), line
        current.append(Field(name, int(lane), int(offset), int(bits), signed == "yes"))
    return tables


def test_docs_tables_match_layout():
    tables = _doc_tables()
    assert set(tables) == {op.name for op in Opcode}
    for op in Opcode:
        assert tuple(tables[op.name]) == LAYOUT[op], op.name


def test_docs_vec_fn_table_matches_isa():
    """The VEC fn table (name, code, kind) equals VecFn and the unary/binary/reduce sets, and every fn
    round-trips through the fn field."""
    from simulator.isa import BINARY_FNS, REDUCE_FNS, UNARY_FNS

    rows = re.findall(r"^\| ([A-Z0-9]+) \| (\d+) \| (unary|binary|reduce|nullary) \|", DOC.read_text(), re.M)
    assert {name: int(code) for name, code, _ in rows} == {f.name: f.value for f in VecFn}
    kinds = {"unary": UNARY_FNS, "binary": BINARY_FNS, "reduce": REDUCE_FNS}
    for name, _, kind in rows:
        assert kind == "nullary" and VecFn[name] == VecFn.FILL or VecFn[name] in kinds.get(kind, ()), name
        assert decode(encode(Opcode.VEC, fn=VecFn[name]))["fn"] == VecFn[name]
