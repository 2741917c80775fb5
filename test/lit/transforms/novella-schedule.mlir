// RUN: novella-opt %s --novella-tile --novella-macro-gen --novella-inst-gen --novella-schedule --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-tile=slots=1 --novella-macro-gen --novella-inst-gen --novella-schedule --split-input-file | FileCheck %s --check-prefix=ONE
// RUN: novella-opt %s --novella-tile --novella-macro-gen --novella-inst-gen --novella-schedule=early=1 --split-input-file | FileCheck %s --check-prefix=E1
// RUN: novella-opt %s --novella-tile --novella-macro-gen --novella-inst-gen --novella-schedule=early=0 --split-input-file | FileCheck %s --check-prefix=E0
// RUN: novella-opt %s --novella-tile=slots=3 --novella-macro-gen --novella-inst-gen --novella-schedule --split-input-file | FileCheck %s --check-prefix=THREE

// A linear over T rows (`?`): x and the output stream through two slots (their
// novella.buffers entries end in 2), so every template that addresses them gets the
// slot stride of that field (the JIT adds stride * (step mod 2)); the resident weight
// slab (guarded to the first step of each column block) and bias row (guarded to the
// op's first step) get none. With two accumulator halves, a block's epilogue runs under
// the next block's MATMUL (into `out`) and the last block's after its own (into `out2`).
// Every streamed LOAD and STORE is slotted, so the macro's token distances are 2 and 2.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w"
// CHECK: %[[B:.*]] = "novella.weight"() {name = "b"
// CHECK: "novella.macro"() ({
// CHECK-NEXT: "novella.inst"(%[[W]]) {{{[^}]*}}opcode = "LOAD", {{[^}]*}}rows = 32 : i64, sram_addr = 0 : i64, {{[^}]*}}when
// CHECK-NEXT: "novella.inst"(%[[X]]) {{{.*}}opcode = "LOAD", {{.*}}slot = {sram_addr = 1024 : i64}, sram_addr = 2080 : i64
// CHECK-NEXT: "novella.inst"(%[[B]]) {{{[^}]*}}opcode = "LOAD", {{[^}]*}}rows = 1 : i64, sram_addr = 2048 : i64, {{[^}]*}}when
// CHECK-NEXT: "novella.inst"() {{{.*}}dst_addr = 4128 : i64, {{.*}}fn = "ADD", {{.*}}slot = {dst_addr = 512 : i64}
// CHECK-NEXT: "novella.inst"() {a_addr = 4128 : i64, {{.*}}fn = "RELU", {{.*}}slot = {a_addr = 512 : i64, dst_addr = 512 : i64}
// CHECK-NEXT: "novella.inst"() {{{.*}}opcode = "STORE", {{.*}}slot = {sram_addr = 512 : i64}, sram_addr = 4128 : i64
// CHECK-NEXT: "novella.inst"() {a_addr = 2080 : i64, {{.*}}opcode = "MATMUL", slot = {a_addr = 1024 : i64}
// CHECK-NEXT: "novella.inst"() {{{.*}}dst_addr = 5152 : i64, {{.*}}fn = "ADD", {{.*}}slot = {dst_addr = 512 : i64}
// CHECK-NEXT: "novella.inst"() {a_addr = 5152 : i64, {{.*}}fn = "RELU", {{.*}}slot = {a_addr = 512 : i64, dst_addr = 512 : i64}
// CHECK-NEXT: "novella.inst"() {{{.*}}opcode = "STORE", {{.*}}slot = {sram_addr = 512 : i64}, sram_addr = 5152 : i64
// CHECK-NEXT: }) {buffers = {a = ["spad", 2080, 1024, 2], {{.*}}out = ["spad", 4128, 512, 2], out2 = ["spad", 5152, 512, 2], w = ["spad", 0, 2048]}, {{.*}}schedule = {load_slots = 2 : i64, store_slots = 2 : i64}
// With one slot per buffer nothing is slotted and the token distances are 1 (single buffering).
// ONE-LABEL: func.func @linear
// ONE-NOT: slot =
// ONE: schedule = {load_slots = 1 : i64, store_slots = 1 : i64}
// With three slots per streamed buffer (`--novella-tile=slots=3`) each slotted field's entry is [stride, 3]
// (the JIT adds stride * (step mod 3)) and the token distances are 3: a load runs two steps ahead.
// THREE-LABEL: func.func @linear
// THREE: opcode = "LOAD", {{.*}}slot = {sram_addr = [1024, 3]}, sram_addr = 2080 : i64
// THREE: opcode = "MATMUL", slot = {a_addr = [1024, 3]}
// THREE: opcode = "STORE", {{.*}}slot = {sram_addr = [512, 3]}
// THREE: buffers = {a = ["spad", 2080, 1024, 3], {{.*}}w = ["spad", 0, 2048]}, {{.*}}schedule = {load_slots = 3 : i64, store_slots = 3 : i64}
#x = affine_map<()[s0] -> (1, s0, 64)>
#y = affine_map<()[s0] -> (1, s0, 32)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @linear(%x: tensor<1x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (2080)>}) -> tensor<1x?x32xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (2048)>} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 2080)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, #x>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, #y>
    return %0 : tensor<1x?x32xf32, #y>
  }
}

// -----

// An elementwise add of two [2T, 64] views: 64-row tiles (4096 elements, the slot stride);
// both inputs and the output stream, and a
// STORE reads a slotted buffer, so loads and stores overlap compute (distances 2 and 2).
// CHECK-LABEL: func.func @add
// CHECK: opcode = "LOAD", {{.*}}slot = {sram_addr = 4096 : i64}, sram_addr = 0 : i64
// CHECK: opcode = "VEC", {{.*}}slot = {a_addr = 4096 : i64, b_addr = 4096 : i64, dst_addr = 4096 : i64}
// CHECK: opcode = "STORE", {{.*}}slot = {sram_addr = 4096 : i64}
// CHECK: schedule = {load_slots = 2 : i64, store_slots = 2 : i64}
// ONE-LABEL: func.func @add
// ONE-NOT: slot =
// ONE: schedule = {load_slots = 1 : i64, store_slots = 1 : i64}
#x = affine_map<()[s0] -> (2, s0, 64)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @add(%a: tensor<2x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (0)>}, %b: tensor<2x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (s0 * 128)>}) -> tensor<2x?x64xf32, #x> {
    %0 = "novella.add"(%a, %b) {novella.dram = affine_map<()[s0] -> (s0 * 256)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<2x?x64xf32, #x>, tensor<2x?x64xf32, #x>) -> tensor<2x?x64xf32, #x>
    return %0 : tensor<2x?x64xf32, #x>
  }
}

// -----

// Loads before the barrier (`schedule.early`, one tier per template). The linear after the add: its weight
// slab and bias read DRAM the add does not write, its x rows read the add's result (tier 0). The add's
// STOREs read t2 only, so the weight slab at 0 could load once the add's compute is done (tier 1, E1); by
// default the linear's SPAD buffers move above the add's (24704 = the end of acol), clear of all of them,
// so its leading loads wait only for the barrier before the add (tier 2). The bias load moves in front of
// the x load (other buffers), which waits for the barrier. With early=0 nothing moves and no tier is set.
// CHECK-LABEL: func.func @add_linear
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w"
// CHECK: %[[B:.*]] = "novella.weight"() {name = "b"
// CHECK: %[[A:.*]] = "novella.macro"()
// CHECK: kernel = "novella.add", schedule = {load_slots = 2 : i64, store_slots = 2 : i64}
// CHECK: "novella.macro"()
// CHECK-NEXT: "novella.inst"(%[[W]]) {{.*}}opcode = "LOAD", {{.*}}sram_addr = 24704 : i64
// CHECK-NEXT: "novella.inst"(%[[B]]) {{.*}}opcode = "LOAD", {{.*}}sram_addr = 26752 : i64
// CHECK-NEXT: "novella.inst"(%[[A]]) {{.*}}opcode = "LOAD", {{.*}}sram_addr = 26784 : i64
// CHECK: buffers = {a = ["spad", 26784, 1024, 2], {{.*}}w = ["spad", 24704, 2048]}, {{.*}}kernel = "novella.linear", schedule = {early = [2, 2, 0, 0, 0, 0, 0, 0, 0, 0], load_slots = 2 : i64, store_slots = 2 : i64}
// E1-LABEL: func.func @add_linear
// E1: kernel = "novella.add", schedule = {load_slots = 2 : i64, store_slots = 2 : i64}
// E1: buffers = {a = ["spad", 2080, 1024, 2], {{.*}}w = ["spad", 0, 2048]}, {{.*}}kernel = "novella.linear", schedule = {early = [1, 1, 0, 0, 0, 0, 0, 0, 0, 0], load_slots = 2 : i64, store_slots = 2 : i64}
// E0-LABEL: func.func @add_linear
// E0-NOT: early =
#x = affine_map<()[s0] -> (1, s0, 64)>
#y = affine_map<()[s0] -> (1, s0, 32)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @add_linear(%x: tensor<1x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (2080)>}) -> tensor<1x?x32xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (2048)>} : () -> tensor<32xf32>
    %a = "novella.add"(%x, %x) {novella.dram = affine_map<()[s0] -> (s0 * 64 + 2080)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, #x>, tensor<1x?x64xf32, #x>) -> tensor<1x?x64xf32, #x>
    %0 = "novella.linear"(%a, %w, %b) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 128 + 2080)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, #x>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, #y>
    return %0 : tensor<1x?x32xf32, #y>
  }
}

// -----

// Two generics read the same broadcast tensor %c (RoPE's cos, read by the q and the k rotation), loaded at
// the first step only into the same buffer: the second macro's LOAD of it is dropped (the first's left it
// there, and nothing writes that buffer in either), and its reader takes no slot (the buffer keeps one).
// CHECK-LABEL: func.func @reload
// CHECK: "novella.macro"
// CHECK: "novella.inst"(%arg2) {{{.*}}opcode = "LOAD", {{.*}}sram_addr = 512 : i64, {{.*}}when =
// CHECK: kernel = "novella.generic"
// CHECK-NEXT: "novella.macro"
// CHECK-NOT: "novella.inst"(%arg2)
// CHECK: b_addr = 512 : i64, {{.*}}fn = "MUL", {{.*}}slot = {a_addr = 256 : i64, dst_addr = 256 : i64}
// CHECK-NOT: "novella.inst"(%arg2)
// CHECK: kernel = "novella.generic"
module attributes {novella.symbols = {s0 = ["T", 1, 64]}} {
  func.func @reload(%q: tensor<8x4x1x32xf32> {novella.dram = affine_map<()[s0] -> (0)>}, %k: tensor<8x4x1x32xf32> {novella.dram = affine_map<()[s0] -> (8192)>}, %c: tensor<8x1x1x32xf32> {novella.dram = affine_map<()[s0] -> (16384)>}) -> (tensor<8x4x1x32xf32>, tensor<8x4x1x32xf32>) attributes {novella.dram_size = affine_map<()[s0] -> (36864)>} {
    %0 = "novella.generic"(%q, %c) ({
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      "novella.yield"(%m) : (f32) -> ()
    }) {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>], novella.dram = affine_map<()[s0] -> (18432)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0>} : (tensor<8x4x1x32xf32>, tensor<8x1x1x32xf32>) -> tensor<8x4x1x32xf32>
    %1 = "novella.generic"(%k, %c) ({
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      "novella.yield"(%m) : (f32) -> ()
    }) {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>], novella.dram = affine_map<()[s0] -> (26624)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0>} : (tensor<8x4x1x32xf32>, tensor<8x1x1x32xf32>) -> tensor<8x4x1x32xf32>
    return %0, %1 : tensor<8x4x1x32xf32>, tensor<8x4x1x32xf32>
  }
}

// -----

// The cost model's ring (`ring` in the linear's tiles): whisper-tiny's fc2 shape over T rows (`?`), planned
// at the nominal length, is DRAM-bound with x and W tiles streamed; a third slot for both (and a smaller
// tk, to fit) lets their loads run two steps ahead. The loads' distance is 3, the output keeps two slots
// (its STORE's distance 2).
// CHECK-LABEL: func.func @ring
// CHECK: opcode = "LOAD", {{.*}}slot = {sram_addr = [4096, 3]}, sram_addr = 0 : i64
// CHECK-NEXT: opcode = "LOAD", {{.*}}slot = {sram_addr = [4096, 3]}, sram_addr = 12672 : i64
// CHECK: opcode = "MATMUL", slot = {a_addr = [4096, 3], b_addr = [4096, 3]}
// CHECK: opcode = "STORE", {{.*}}slot = {sram_addr = 16384 : i64}
// CHECK: buffers = {a = ["spad", 12672, 4096, 3], {{.*}}out = ["spad", 24960, 16384, 2], w = ["spad", 0, 4096, 3]}, {{.*}}schedule = {load_slots = 3 : i64, store_slots = 2 : i64}, tiles = {ring = 3 : i64
#x = affine_map<()[s0] -> (1, s0, 1536)>
#y = affine_map<()[s0] -> (1, s0, 384)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @ring(%x: tensor<1x?x1536xf32, #x> {novella.dram = affine_map<()[s0] -> (590208)>}) -> tensor<1x?x384xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<384x1536xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (589824)>} : () -> tensor<384xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 1536 + 590208)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x1536xf32, #x>, tensor<384x1536xf32>, tensor<384xf32>) -> tensor<1x?x384xf32, #y>
    return %0 : tensor<1x?x384xf32, #y>
  }
}
