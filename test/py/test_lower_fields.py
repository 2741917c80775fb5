"""The lower IR's declared fields: the tables are the ISA's (generated, not kept by hand), every
`novella.*` attribute name in the compiler is a declared annotation or an op, and the verifiers
refuse what the passes must never leave (checked on IR a real pipeline produced)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch_mlir import ir

from novella_mlir.dialects import discardable, fields
from novella_mlir.dialects.context import make_context
from novella_mlir.dialects.dialect import Novella
from novella_mlir.transforms.registry import run_passes
from simulator import isa
from simulator.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_inst_fields_are_the_isa_layout_but_the_token_bits():
    header = {f.name for f in isa.HEADER}
    for op, layout in isa.LAYOUT.items():
        assert set(fields.INST_FIELDS[op.name]) == {f.name for f in layout} - header


def test_buffer_roles_name_isa_fields_and_tile_ops_keep_the_rest():
    for name, opcode in fields.TILE_OPCODES.items():
        layout = fields.INST_FIELDS[opcode]
        placed = set()
        for _, addr, mem in fields.ROLES[opcode].values():
            assert addr in layout and (mem in fields.MEMS or mem in layout)
            placed |= {addr, mem}
        assert set(layout) - placed - {"dram_base"} <= fields.TILE_FIELDS[name]


def test_every_novella_attribute_name_in_the_compiler_is_declared():
    declared = {a.name for a in discardable.DECLARED} | {op.OPERATION_NAME for op in Novella.operations}
    used = set()
    for path in (ROOT / "novella_mlir").rglob("*.py"):
        used |= set(re.findall(r"[\"'](novella\.[a-z_]+)[\"']", path.read_text()))
    assert used - declared == set(), "declare each novella.* attribute in dialects/discardable.py"


_LINEAR = """
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @f(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "relu"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %0 : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }
}
"""


@pytest.fixture
def lowered():
    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(_LINEAR)
        stages = ["novella-legalize", "novella-allocate", "novella-tile", "novella-macro-gen"]
        run_passes(module, stages + ["novella-inst-gen", "novella-schedule"], load_config())
        yield module


def _macro(module):
    fn = module.body.operations[0]
    return next(op for op in fn.regions[0].blocks[0].operations if op.operation.name == "novella.macro")


def _errors(module) -> str:
    with pytest.raises(ir.MLIRError) as e:
        module.operation.verify()
    return " ".join(d.message for d in e.value.error_diagnostics)


def test_the_pipeline_leaves_verified_declared_fields(lowered):
    macro = _macro(lowered)
    assert {k for k, _ in macro.attributes.items()} == set(fields.MACRO_FIELDS)
    sched = {a.name: a.attr.value for a in ir.DictAttr(macro.attributes["schedule"])}
    assert sched == {"load_slots": 2, "store_slots": 2}  # x and the output stream through two slots
    assert lowered.operation.verify()


def test_an_out_of_range_constant_left_in_an_instruction_is_refused(lowered):
    inst = next(iter(_macro(lowered).regions[0].blocks[0].operations))
    inst.attributes["rows"] = fields.i64(1 << 12)
    assert "rows = 4096 does not fit its 12-bit field [0, 4095]" in _errors(lowered)


def test_a_macro_schedule_outside_the_token_rule_is_refused(lowered):
    _macro(lowered).attributes["schedule"] = ir.DictAttr.get(
        {"load_slots": fields.i64(3), "store_slots": fields.i64(1)}
    )
    assert "schedule must be {load_slots = 1..2, store_slots = 1..2} (the most slots of a buffer)" in _errors(lowered)


def test_an_undeclared_annotation_is_named(lowered):
    fn = lowered.body.operations[0]
    fn.attributes["novella.dram_sizes"] = ir.UnitAttr.get()
    op, message = discardable.check(lowered.operation)
    assert op.operation.name == "func.func" and "'novella.dram_sizes' may not annotate this func" in message
