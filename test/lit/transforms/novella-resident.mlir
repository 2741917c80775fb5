// RUN: novella-opt %s --novella-resident --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-resident=enable=0 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: novella-opt %s --split-input-file --novella-resident --novella-tile --novella-macro-gen --novella-inst-gen --novella-schedule | FileCheck %s --check-prefix=MACRO
// RUN: novella-opt %s --novella-resident=share=75 --split-input-file | FileCheck %s --check-prefix=WIDE
// RUN: novella-opt %s --novella-resident=priced=0 --split-input-file | FileCheck %s --check-prefix=HALF

// linear -> linear at T in [1, 32] (d = 64; a shape bucket, its tiles planned for T = 32): the hidden [1, T, 64] is 2048 elements at T = 32, kept at the
// top of the scratchpad (65536 - 2048). The first linear writes it there and does not store it (its one
// reader is the second linear's x); both tile below it.
// CHECK-LABEL: func.func @chain
// CHECK: %[[H:.*]] = "novella.linear"(%arg0, {{.*}}novella.resident = {out = 63488 : i64, out_size = 2048 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 63488 : i64}
// CHECK: "novella.linear"(%[[H]], {{.*}}novella.resident = {x = 63488 : i64, x_size = 2048 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 63488 : i64}
// OFF-LABEL: func.func @chain
// OFF-NOT: novella.resident
// In the macros: the first writes each output tile into the region (its epilogue's last VEC, the RELU,
// writes there: no COPY, no STORE); the second's MATMULs read their x tiles there (no LOAD of its tensor 0,
// no COPY: it does not normalize x in place); the region is a buffer of both.
// MACRO-LABEL: func.func @chain
// MACRO: "novella.macro"
// MACRO-NOT: opcode = "STORE"
// MACRO-NOT: fn = "COPY"
// MACRO: dst_addr = #{{.*}}, {{.*}}dst_stride = 64 : i64, fn = "RELU"
// MACRO-NOT: opcode = "STORE"
// MACRO-NOT: fn = "COPY"
// MACRO: rout = ["spad", 63488, 2048]
// MACRO-NOT: tensor = 0
// MACRO-NOT: fn = "COPY"
// MACRO: opcode = "MATMUL"
// MACRO-NOT: fn = "COPY"
// MACRO: opcode = "STORE"
// MACRO: rx = ["spad", 63488, 2048]
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @chain(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (8320)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 192 + 8320)>} {
    %w1 = "novella.weight"() {name = "w1", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64x64xf32>
    %b1 = "novella.weight"() {name = "b1", novella.dram = affine_map<()[s0] -> (4096)>} : () -> tensor<64xf32>
    %w2 = "novella.weight"() {name = "w2", novella.dram = affine_map<()[s0] -> (4160)>} : () -> tensor<64x64xf32>
    %b2 = "novella.weight"() {name = "b2", novella.dram = affine_map<()[s0] -> (8256)>} : () -> tensor<64xf32>
    %h = "novella.linear"(%arg0, %w1, %b1) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 8320)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %y = "novella.linear"(%h, %w2, %b2) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 8320)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The hidden is also the function's result, read from DRAM: it stays there for the second linear too.
// CHECK-LABEL: func.func @also_returned
// CHECK-NOT: novella.resident
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @also_returned(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (8320)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 192 + 8320)>} {
    %w1 = "novella.weight"() {name = "w1", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64x64xf32>
    %b1 = "novella.weight"() {name = "b1", novella.dram = affine_map<()[s0] -> (4096)>} : () -> tensor<64xf32>
    %w2 = "novella.weight"() {name = "w2", novella.dram = affine_map<()[s0] -> (4160)>} : () -> tensor<64x64xf32>
    %b2 = "novella.weight"() {name = "b2", novella.dram = affine_map<()[s0] -> (8256)>} : () -> tensor<64xf32>
    %h = "novella.linear"(%arg0, %w1, %b1) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 8320)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %y = "novella.linear"(%h, %w2, %b2) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 8320)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %h, %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// At T up to 1500 the hidden (96000 elements) is larger than half the scratchpad: it goes through DRAM.
// CHECK-LABEL: func.func @too_long
// CHECK-NOT: novella.resident
module attributes {novella.symbols = {s0 = ["T", 1, 1500]}} {
  func.func @too_long(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (8320)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 192 + 8320)>} {
    %w1 = "novella.weight"() {name = "w1", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64x64xf32>
    %b1 = "novella.weight"() {name = "b1", novella.dram = affine_map<()[s0] -> (4096)>} : () -> tensor<64xf32>
    %w2 = "novella.weight"() {name = "w2", novella.dram = affine_map<()[s0] -> (4160)>} : () -> tensor<64x64xf32>
    %b2 = "novella.weight"() {name = "b2", novella.dram = affine_map<()[s0] -> (8256)>} : () -> tensor<64xf32>
    %h = "novella.linear"(%arg0, %w1, %b1) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 8320)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %y = "novella.linear"(%h, %w2, %b2) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 8320)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// An RMSNorm's result read only by a linear's input (its norm not fused into the linear): kept too.
// CHECK-LABEL: func.func @norm_then_linear
// CHECK: "novella.rms_norm"(%arg0, {{.*}}novella.resident = {out = 63488 : i64, out_size = 2048 : i64}
// CHECK: "novella.linear"(%{{.*}}novella.resident = {x = 63488 : i64, x_size = 2048 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @norm_then_linear(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (4224)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 192 + 4224)>} {
    %nw = "novella.weight"() {name = "nw", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64xf32>
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (64)>} : () -> tensor<64x64xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (4160)>} : () -> tensor<64xf32>
    %n = "novella.rms_norm"(%arg0, %nw) {eps = 9.99999997E-7 : f32, novella.dram = affine_map<()[s0] -> (s0 * 64 + 4224)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %y = "novella.linear"(%n, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 4224)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// Attention (a prefill's or an encoder's, no paged KV cache) at T in [1, 32] (planned for 32; d = 64, two
// heads of 32): the q, k and v projections keep their results (2048 elements each) for the attention, which
// reads its heads-minor q, k and v there (head h of row r at r * 64 + h * 32), and keeps its output for
// o_proj's x, in the region below theirs (all three are live while it writes it).
// CHECK-LABEL: func.func @attention
// CHECK: "novella.linear"(%arg0, {{.*}}novella.resident = {out = 63488 : i64, out_size = 2048 : i64}
// CHECK: "novella.linear"(%arg0, {{.*}}novella.resident = {out = 61440 : i64, out_size = 2048 : i64}
// CHECK: "novella.linear"(%arg0, {{.*}}novella.resident = {out = 59392 : i64, out_size = 2048 : i64}
// CHECK: "novella.flash_attention"({{.*}}novella.resident = {k = 61440 : i64, k_size = 2048 : i64, out = 57344 : i64, out_size = 2048 : i64, v = 59392 : i64, v_size = 2048 : i64, x = 63488 : i64, x_size = 2048 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 57344 : i64}
// CHECK: "novella.linear"(%{{.*}}novella.resident = {x = 57344 : i64, x_size = 2048 : i64}
// OFF-LABEL: func.func @attention
// OFF-NOT: novella.resident
// In its macro nothing is loaded or stored: the query's scaling MUL reads the region with the row stride of
// the projection (64), the score MATMUL and P @ V read K and V there, the normalizing MUL (by 1 / l) writes
// the output there.
// MACRO-LABEL: func.func @attention
// MACRO: a_stride = 64 : i64{{.*}}fn = "MUL"
// MACRO-NOT: opcode = "LOAD"
// MACRO-NOT: opcode = "STORE"
// MACRO: b_stride = 64 : i64{{.*}}opcode = "MATMUL"
// MACRO-NOT: opcode = "LOAD"
// MACRO-NOT: opcode = "STORE"
// MACRO: b_stride = 64 : i64{{.*}}opcode = "MATMUL"
// MACRO-NOT: opcode = "LOAD"
// MACRO-NOT: opcode = "STORE"
// MACRO: dst_stride = 64 : i64, fn = "MUL"
// MACRO-NOT: opcode = "LOAD"
// MACRO-NOT: opcode = "STORE"
// MACRO: rk = ["spad", 61440, 2048], rout = ["spad", 57344, 2048], rv = ["spad", 59392, 2048], rx = ["spad", 63488, 2048]{{.*}}kernel = "novella.flash_attention"
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @attention(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (16640)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 16640)>} {
    %0 = "novella.weight"() {name = "q.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64x64xf32>
    %1 = "novella.weight"() {name = "q.bias", novella.dram = affine_map<()[s0] -> (4096)>} : () -> tensor<64xf32>
    %2 = "novella.linear"(%arg0, %0, %1) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 64 + 16640)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.reshape"(%2) {novella.dram = affine_map<()[s0] -> (s0 * 64 + 16640)>} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>
    %4 = "novella.weight"() {name = "k.weight", novella.dram = affine_map<()[s0] -> (4160)>} : () -> tensor<64x64xf32>
    %5 = "novella.weight"() {name = "k.bias", novella.dram = affine_map<()[s0] -> (8256)>} : () -> tensor<64xf32>
    %6 = "novella.linear"(%arg0, %4, %5) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 16640)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %7 = "novella.reshape"(%6) {novella.dram = affine_map<()[s0] -> (s0 * 128 + 16640)>} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>
    %8 = "novella.weight"() {name = "v.weight", novella.dram = affine_map<()[s0] -> (8320)>} : () -> tensor<64x64xf32>
    %9 = "novella.weight"() {name = "v.bias", novella.dram = affine_map<()[s0] -> (12416)>} : () -> tensor<64xf32>
    %10 = "novella.linear"(%arg0, %8, %9) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 192 + 16640)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %11 = "novella.reshape"(%10) {novella.dram = affine_map<()[s0] -> (s0 * 192 + 16640)>} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>
    %12 = "novella.flash_attention"(%3, %7, %11) {causal = 0 : i64, heads_minor = array<i64: 1, 1, 1, 1>, novella.dram = affine_map<()[s0] -> (s0 * 256 + 16640)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 0>, safe = false, scale = 0.176776692 : f32} : (tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>, tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>, tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>) -> tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>
    %13 = "novella.reshape"(%12) {novella.dram = affine_map<()[s0] -> (s0 * 256 + 16640)>} : (tensor<1x?x2x32xf32, affine_map<()[s0] -> (1, s0, 2, 32)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %14 = "novella.weight"() {name = "o.weight", novella.dram = affine_map<()[s0] -> (12480)>} : () -> tensor<64x64xf32>
    %15 = "novella.weight"() {name = "o.bias", novella.dram = affine_map<()[s0] -> (16576)>} : () -> tensor<64xf32>
    %16 = "novella.linear"(%13, %14, %15) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 320 + 16640)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %16 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// A decode step's key: a linear (k_proj) -> RoPE (a generic reading it as input 0 and its rotate_half as
// input 2, rotated in SRAM) -> the paged append at position `?` (past). The linear's result is kept for the
// generic, the generic's for the append's new rows (`new`): neither goes through DRAM.
// CHECK-LABEL: func.func @rope_append
// CHECK: "novella.linear"(%arg0, {{.*}}novella.resident = {out = [[K:[0-9]+]] : i64, out_size = 256 : i64}
// CHECK: novella.resident = {out = [[R:[0-9]+]] : i64, out_size = 256 : i64, x = [[K]] : i64, x_size = 256 : i64}
// CHECK: "novella.kv_append"(%arg3, {{.*}}novella.resident = {new = [[R]] : i64, new_size = 256 : i64}
// OFF-LABEL: func.func @rope_append
// OFF-NOT: novella.resident
// The append COPYs the first sequence's new rows from the region (no LOAD; its STOREs wait for that compute)
// and STOREs them into each sequence's page, the other sequences' straight from the region.
// MACRO-LABEL: func.func @rope_append
// MACRO: rout = ["spad", [[K2:[0-9]+]], 256]
// The RoPE's VECs read the key where it is kept and write its result into its own region (no COPY in or
// out); rotate_half(k) * sin is two half-width MULs of k's swapped halves, subtracted from the first half of
// k * cos and added to its second (the negation folded into the SUB: the same float operations).
// MACRO-NOT: fn = "COPY"
// MACRO: cols = 16 : i64, {{.*}}fn = "MUL"
// MACRO-NEXT: cols = 16 : i64, {{.*}}fn = "MUL"
// MACRO-NEXT: cols = 32 : i64, {{.*}}fn = "MUL"
// MACRO-NEXT: cols = 16 : i64, {{.*}}fn = "SUB"
// MACRO-NEXT: cols = 16 : i64, {{.*}}fn = "ADD"
// MACRO: rout = ["spad", [[R2:[0-9]+]], 256], rx = ["spad", [[K2]], 256]
// MACRO-NOT: opcode = "LOAD"
// MACRO: fn = "COPY", mode = "TENSOR", opcode = "VEC", rows = 2 : i64
// MACRO: opcode = "STORE", {{.*}}sram_addr = 0 : i64
// MACRO: chain = 1 : i64, {{.*}}opcode = "STORE", {{.*}}sram_addr = {{[1-9][0-9]+}} : i64
// MACRO: out = ["spad", 0, 64], rnew = ["spad", [[R2]], 256]
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @rope_append(%arg0: tensor<4x1x64xf32> {novella.dram = affine_map<()[s0] -> (0)>}, %arg1: tensor<4x1x1x32xf32> {novella.dram = affine_map<()[s0] -> (4416)>}, %arg2: tensor<4x1x1x32xf32> {novella.dram = affine_map<()[s0] -> (4544)>}, %arg3: tensor<4x2x?x32xf32, affine_map<()[s0] -> (4, 2, s0, 32)>> {novella.dram = affine_map<()[s0] -> (2147483648)>}) -> tensor<4x2x?x32xf32, affine_map<()[s0] -> (4, 2, s0 + 1, 32)>> attributes {novella.dram_size = affine_map<()[s0] -> (5184)>} {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (256)>} : () -> tensor<64x64xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (4352)>} : () -> tensor<64xf32>
    %k = "novella.linear"(%arg0, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (4672)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<4x1x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<4x1x64xf32>
    %k1 = "novella.reshape"(%k) {novella.dram = affine_map<()[s0] -> (4672)>} : (tensor<4x1x64xf32>) -> tensor<4x1x2x32xf32>
    %k2 = "novella.reshape"(%k1) {novella.dram = affine_map<()[s0] -> (4672)>} : (tensor<4x1x2x32xf32>) -> tensor<4x2x1x32xf32>
    %r = "novella.generic"(%k2, %arg1, %k2, %arg2) ({
    ^bb0(%a0: f32, %a1: f32, %a2: f32, %a3: f32):
      %0 = arith.mulf %a2, %a3 : f32
      %1 = arith.mulf %a0, %a1 : f32
      %2 = arith.addf %1, %0 : f32
      "novella.yield"(%2) : (f32) -> ()
    }) {indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, 0, d2, d3)>], novella.dram = affine_map<()[s0] -> (4928)>, novella.rotate_half = [2], novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>} : (tensor<4x2x1x32xf32>, tensor<4x1x1x32xf32>, tensor<4x2x1x32xf32>, tensor<4x1x1x32xf32>) -> tensor<4x2x1x32xf32>
    %c = "novella.kv_append"(%arg3, %r) {dim = 2 : i64, novella.dram = affine_map<()[s0] -> (2147483648)>, novella.paged = {batch = 4 : i64, head_dim = 32 : i64, heads = 2 : i64, page_elems = 1024 : i64, page_size = 16 : i64, seq_pages = 4096 : i64, slot = 0 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<4x2x?x32xf32, affine_map<()[s0] -> (4, 2, s0, 32)>>, tensor<4x2x1x32xf32>) -> tensor<4x2x?x32xf32, affine_map<()[s0] -> (4, 2, s0 + 1, 32)>>
    return %c : tensor<4x2x?x32xf32, affine_map<()[s0] -> (4, 2, s0 + 1, 32)>>
  }
}

// -----

// A decode step's attention over the paged KV cache (GQA, one query row per head: the two query heads of a
// cache head are its block's rows): it reads its query (q_proj's result) where it is kept, `x`, and writes
// its output into a region (`out`) that o_proj reads; its key and value are the paged cache (`PAGED_READS`).
// CHECK-LABEL: func.func @decode_attention
// CHECK: "novella.linear"(%arg0, {{.*}}novella.resident = {out = [[Q:[0-9]+]] : i64, out_size = 64 : i64}
// CHECK: "novella.flash_attention"({{.*}}novella.resident = {out = [[O:[0-9]+]] : i64, out_size = 64 : i64, x = [[Q]] : i64, x_size = 64 : i64}
// CHECK: "novella.linear"({{.*}}novella.resident = {x = [[O]] : i64, x_size = 64 : i64}
// OFF-LABEL: func.func @decode_attention
// OFF-NOT: novella.resident
// The held query rows of both cache heads (two grid steps) are scaled from the region into `q` at once (no
// LOAD of them), the normalizing DIV writes each head's rows into the output's region, and nothing is
// STOREd: the attention's LOADs are its key and value pages.
// MACRO-LABEL: func.func @decode_attention
// MACRO: kernel = "novella.linear"
// MACRO: a_addr = [[Q2:[0-9]+]] : i64, {{.*}}fn = "MUL", imm = 2.500000e-01 : f32, mode = "SCALAR", opcode = "VEC", rows = 4 : i64
// MACRO-NOT: opcode = "STORE"
// MACRO: fn = "DIV", mode = "COL"
// MACRO-NOT: opcode = "STORE"
// MACRO: rout = ["spad", [[O2:[0-9]+]], 64], rx = ["spad", [[Q2]], 64]{{.*}}kernel = "novella.flash_attention"
// MACRO: rx = ["spad", [[O2]], 64]{{.*}}kernel = "novella.linear"
#map = affine_map<()[s0] -> (1, 2, s0, 16)>
#map1 = affine_map<()[s0] -> (1, 2, s0 + 1, 16)>
#map2 = affine_map<()[s0] -> (8640)>
#map3 = affine_map<()[s0] -> (0)>
#map4 = affine_map<()[s0] -> (4096)>
#map5 = affine_map<()[s0] -> (4160)>
#map6 = affine_map<()[s0] -> (8256)>
#map7 = affine_map<()[s0] -> (8448)>
#map8 = affine_map<()[s0] -> (2147483648)>
#map9 = affine_map<()[s0] -> (2164260864)>
#map10 = affine_map<()[s0] -> (8512)>
#map11 = affine_map<()[s0] -> (8576)>
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @decode_attention(%arg0: tensor<1x1x64xf32> {novella.dram = affine_map<()[s0] -> (8320)>}, %arg1: tensor<1x2x?x16xf32, #map> {novella.dram = #map8}, %arg2: tensor<1x2x?x16xf32, #map> {novella.dram = #map9}, %arg3: tensor<1x2x1x16xf32> {novella.dram = affine_map<()[s0] -> (8384)>}, %arg4: tensor<1x2x1x16xf32> {novella.dram = affine_map<()[s0] -> (8416)>}) -> (tensor<1x1x64xf32>, tensor<1x2x?x16xf32, #map1>, tensor<1x2x?x16xf32, #map1>) attributes {novella.dram_size = #map2, novella.kv_cache = {args = {"1" = 0 : i64, "2" = 1 : i64}, page_size = 16 : i64, results = [1, 2], slots = [{head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64}, {head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64}]}} {
    %0 = "novella.weight"() {name = "wq", novella.dram = #map3} : () -> tensor<64x64xf32>
    %1 = "novella.weight"() {name = "bq", novella.dram = #map4} : () -> tensor<64xf32>
    %2 = "novella.weight"() {name = "wo", novella.dram = #map5} : () -> tensor<64x64xf32>
    %3 = "novella.weight"() {name = "bo", novella.dram = #map6} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "none", novella.dram = #map7, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x1x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x1x64xf32>
    %5 = "novella.reshape"(%4) {novella.dram = #map7} : (tensor<1x1x64xf32>) -> tensor<1x4x1x16xf32>
    %6 = "novella.kv_append"(%arg1, %arg3) {dim = 2 : i64, novella.dram = #map8, novella.paged = {head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, slot = 0 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x2x?x16xf32, #map>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, #map1>
    %7 = "novella.kv_append"(%arg2, %arg4) {dim = 2 : i64, novella.dram = #map9, novella.paged = {head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, slot = 1 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x2x?x16xf32, #map>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, #map1>
    %8 = "novella.flash_attention"(%5, %6, %7) {causal = 0 : i64, heads_minor = array<i64: 0, 0, 0, 0>, novella.dram = #map10, novella.kv_group = 2 : i64, novella.paged_key = {batch = 1 : i64, head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, seq_pages = 1 : i64, slot = 0 : i64}, novella.paged_value = {batch = 1 : i64, head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, seq_pages = 1 : i64, slot = 1 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 0>, safe = false, scale = 2.500000e-01 : f32} : (tensor<1x4x1x16xf32>, tensor<1x2x?x16xf32, #map1>, tensor<1x2x?x16xf32, #map1>) -> tensor<1x4x1x16xf32>
    %9 = "novella.reshape"(%8) {novella.dram = #map10} : (tensor<1x4x1x16xf32>) -> tensor<1x1x64xf32>
    %10 = "novella.linear"(%9, %2, %3) {act = "none", novella.dram = #map11, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x1x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x1x64xf32>
    return %10, %6, %7 : tensor<1x1x64xf32>, tensor<1x2x?x16xf32, #map1>, tensor<1x2x?x16xf32, #map1>
  }
}

// -----

// linear -> linear at T in [1, 40] with a wide hidden [1, T, 1024] (planned for T = 40: 40960 elements, more
// than half the scratchpad, the `share`): kept at 65536 - 40960 = 24576 all the same, as both linears have a
// cost model and are predicted to lose nothing tiling below it (@wide_norm: a norm has none); with priced=0
// the regions never take more than the share.
// HALF-LABEL: func.func @wide
// HALF-NOT: novella.resident
// HALF-LABEL: func.func @wide_norm
// CHECK-LABEL: func.func @wide
// CHECK: "novella.linear"(%arg0, {{.*}}novella.resident = {out = 24576 : i64, out_size = 40960 : i64}
// CHECK: "novella.linear"({{.*}}novella.resident = {x = 24576 : i64, x_size = 40960 : i64}
// WIDE-LABEL: func.func @wide
// WIDE: "novella.linear"(%arg0, {{.*}}novella.resident = {out = 24576 : i64, out_size = 40960 : i64}
// WIDE: "novella.linear"({{.*}}novella.resident = {x = 24576 : i64, x_size = 40960 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 40]}, novella.plan_lengths = [40]} {
  func.func @wide(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (132160)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 1152 + 132160)>} {
    %w1 = "novella.weight"() {name = "w1", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1024x64xf32>
    %b1 = "novella.weight"() {name = "b1", novella.dram = affine_map<()[s0] -> (65536)>} : () -> tensor<1024xf32>
    %w2 = "novella.weight"() {name = "w2", novella.dram = affine_map<()[s0] -> (66560)>} : () -> tensor<64x1024xf32>
    %b2 = "novella.weight"() {name = "b2", novella.dram = affine_map<()[s0] -> (132096)>} : () -> tensor<64xf32>
    %h = "novella.linear"(%arg0, %w1, %b1) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 132160)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1024x64xf32>, tensor<1024xf32>) -> tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>
    %y = "novella.linear"(%h, %w2, %b2) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 1088 + 132160)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>, tensor<64x1024xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The same hidden read by a layer norm, which has no cost model: beyond the share nothing is kept under it
// (what tiling below the region costs it is not priced); with share=75 the hidden is kept at 24576 (the
// norm's result, 40960 more, then fits nowhere).
// CHECK-LABEL: func.func @wide_norm
// CHECK-NOT: novella.resident
// WIDE-LABEL: func.func @wide_norm
// WIDE: "novella.linear"(%arg0, {{.*}}novella.resident = {out = 24576 : i64, out_size = 40960 : i64}
// WIDE: "novella.layer_norm"({{.*}}novella.resident = {x = 24576 : i64, x_size = 40960 : i64}
// WIDE-NOT: novella.resident
module attributes {novella.symbols = {s0 = ["T", 1, 40]}, novella.plan_lengths = [40]} {
  func.func @wide_norm(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (134208)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 2176 + 134208)>} {
    %w1 = "novella.weight"() {name = "w1", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1024x64xf32>
    %b1 = "novella.weight"() {name = "b1", novella.dram = affine_map<()[s0] -> (65536)>} : () -> tensor<1024xf32>
    %w2 = "novella.weight"() {name = "w2", novella.dram = affine_map<()[s0] -> (66560)>} : () -> tensor<64x1024xf32>
    %b2 = "novella.weight"() {name = "b2", novella.dram = affine_map<()[s0] -> (132096)>} : () -> tensor<64xf32>
    %g = "novella.weight"() {name = "g", novella.dram = affine_map<()[s0] -> (132160)>} : () -> tensor<1024xf32>
    %bt = "novella.weight"() {name = "bt", novella.dram = affine_map<()[s0] -> (133184)>} : () -> tensor<1024xf32>
    %h = "novella.linear"(%arg0, %w1, %b1) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 134208)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1024x64xf32>, tensor<1024xf32>) -> tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>
    %n = "novella.layer_norm"(%h, %g, %bt) {eps = 9.99999974E-6 : f32, novella.dram = affine_map<()[s0] -> (s0 * 1088 + 134208)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>, tensor<1024xf32>, tensor<1024xf32>) -> tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>
    %y = "novella.linear"(%n, %w2, %b2) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 2112 + 134208)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>, tensor<64x1024xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The wide hidden planned for T = 64 is the whole scratchpad (65536 elements): only the offset 0 is left, a
// budget of no element for the linears, where nothing fits (not "no budget"): it stays in DRAM.
// CHECK-LABEL: func.func @whole
// CHECK-NOT: novella.resident
module attributes {novella.symbols = {s0 = ["T", 1, 64]}, novella.plan_lengths = [64]} {
  func.func @whole(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (132160)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 1152 + 132160)>} {
    %w1 = "novella.weight"() {name = "w1", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1024x64xf32>
    %b1 = "novella.weight"() {name = "b1", novella.dram = affine_map<()[s0] -> (65536)>} : () -> tensor<1024xf32>
    %w2 = "novella.weight"() {name = "w2", novella.dram = affine_map<()[s0] -> (66560)>} : () -> tensor<64x1024xf32>
    %b2 = "novella.weight"() {name = "b2", novella.dram = affine_map<()[s0] -> (132096)>} : () -> tensor<64xf32>
    %h = "novella.linear"(%arg0, %w1, %b1) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 132160)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1024x64xf32>, tensor<1024xf32>) -> tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>
    %y = "novella.linear"(%h, %w2, %b2) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 1088 + 132160)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x1024xf32, affine_map<()[s0] -> (1, s0, 1024)>>, tensor<64x1024xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}
