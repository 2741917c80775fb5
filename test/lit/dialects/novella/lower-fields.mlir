// RUN: novella-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// The declared fields of a macro over a `?` length verify and print as the contract: grid,
// tiles, buffers (a two-slot one ends in 2), dram and schedule; the tile ops' fields are
// their ISA fields, buffer roles and offsets, over the macro's one grid dim.
// CHECK-LABEL: func.func @macro_fields
// CHECK: "novella.dma_load"(%{{.*}}) {buf_offset = 0 : i64, buffer = "in", {{.*}}rows = #{{.*}}, {{.*}}tensor = 0 : i64}
// CHECK: "novella.vop"() {a = "in", {{.*}}dst = "in", fn = "RELU", rows = #{{.*}}}
// CHECK: }) {buffers = {in = ["spad", 0, 256, 2]}, dram = #{{.*}}, grid = #{{.*}}, kernel = "novella.relu", schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tm = 16 : i64}}
#rows = affine_map<(d0)[s0] -> (16, d0 * -16 + s0)>
module attributes {novella.symbols = {s0 = ["T", 1, 256]}} {
  func.func @macro_fields(%x: tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>) -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {
    %0 = "novella.macro"() ({
      "novella.dma_load"(%x) {buffer = "in", buf_offset = 0 : i64, tensor = 0 : i64, dram_offset = 0 : i64, dram_stride = 16 : i64, row_start = affine_map<(d0)[s0] -> (d0 * 16)>, row_step = 1 : i64, row_bound = affine_map<(d0)[s0] -> (s0)>, rows = #rows, cols = 16 : i64, sram_stride = 16 : i64} : (tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>) -> ()
      "novella.vop"() {fn = "RELU", dst = "in", a = "in", rows = #rows, cols = 16 : i64} : () -> ()
      "novella.dma_store"() {buffer = "in", dram_offset = 0 : i64, dram_stride = 16 : i64, row_start = affine_map<(d0)[s0] -> (d0 * 16)>, row_step = 1 : i64, row_bound = affine_map<(d0)[s0] -> (s0)>, rows = #rows, cols = 16 : i64, sram_stride = 16 : i64} : () -> ()
    }) {kernel = "novella.relu", grid = affine_map<()[s0] -> (s0 ceildiv 16)>, buffers = {in = ["spad", 0, 256, 2]}, dram = affine_map<()[s0] -> (s0 * 16)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tm = 16 : i64}} : () -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
    return %0 : tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
  }
}

// -----

// A macro needs every declared field.
func.func @macro_without_schedule() -> tensor<16xf32> {
  // expected-error @+1 {{'novella.macro' op needs its declared field(s) dram, schedule (written by --novella-macro-gen)}}
  %0 = "novella.macro"() ({
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {}, tiles = {tm = 16 : i64}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

func.func @macro_bad_schedule() -> tensor<16xf32> {
  // expected-error @+1 {{schedule must be {load_slots = 1..1, store_slots = 1..1} (the most slots of a buffer)}}
  %0 = "novella.macro"() ({
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {}, dram = affine_map<() -> (0)>, schedule = {load_slots = 3 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

func.func @macro_bad_buffer() -> tensor<16xf32> {
  // expected-error @+1 {{buffer 'a' needs offset >= 0, size >= 1, slots 2..4 and alternate 1 (with slots 2) if given, got ['spad', 0, 16, 5]}}
  %0 = "novella.macro"() ({
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {a = ["spad", 0, 16, 5]}, dram = affine_map<() -> (0)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

// A tile op's fields are those of its opcode (here VEC's) but the addresses, over the grid's dims.
func.func @tile_unknown_field() -> tensor<16xf32> {
  %0 = "novella.macro"() ({
    // expected-error @+1 {{'novella.vop' op has no field 'sram_addr'}}
    "novella.vop"() {fn = "RELU", dst = "a", a = "a", sram_addr = 0 : i64} : () -> ()
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {a = ["spad", 0, 16]}, dram = affine_map<() -> (0)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

func.func @tile_field_over_other_dims() -> tensor<16xf32> {
  %0 = "novella.macro"() ({
    // expected-error @+1 {{field 'rows' must map the 1 grid dims to one or more values}}
    "novella.vop"() {fn = "RELU", dst = "a", a = "a", rows = affine_map<(d0, d1) -> (d1)>} : () -> ()
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {a = ["spad", 0, 16]}, dram = affine_map<() -> (0)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

// An instruction template's constant fields fit their ISA widths (simulator/isa.py), after every pass.
func.func @inst_out_of_range() -> tensor<16xf32> {
  %0 = "novella.macro"() ({
    // expected-error @+1 {{VEC.rows = 4096 does not fit its 12-bit field [0, 4095]}}
    "novella.inst"() {opcode = "VEC", fn = "RELU", mode = "TENSOR", dst_mem = 0 : i64, dst_addr = 0 : i64, a_mem = 0 : i64, a_addr = 0 : i64, rows = 4096 : i64, cols = 16 : i64} : () -> ()
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {a = ["spad", 0, 16]}, dram = affine_map<() -> (0)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

func.func @inst_token_bits() -> tensor<16xf32> {
  %0 = "novella.macro"() ({
    // expected-error @+1 {{VEC has no field 'pop_prev'}}
    "novella.inst"() {opcode = "VEC", fn = "RELU", pop_prev = 1 : i64} : () -> ()
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {}, dram = affine_map<() -> (0)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

func.func @inst_bad_slot() -> tensor<16xf32> {
  %0 = "novella.macro"() ({
    // expected-error @+1 {{'slot' must map address fields to strides >= 0 or [stride > 0, slots 3..4], got rows = 16 : i64}}
    "novella.inst"() {opcode = "VEC", fn = "RELU", rows = 16 : i64, slot = {rows = 16 : i64}} : () -> ()
  }) {kernel = "novella.relu", grid = affine_map<() -> (1)>, buffers = {}, dram = affine_map<() -> (0)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {}} : () -> tensor<16xf32>
  return %0 : tensor<16xf32>
}
