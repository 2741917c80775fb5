// RUN: novella-opt %s --novella-resident --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-resident=enable=0 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: novella-opt %s --split-input-file --novella-resident --novella-tile --novella-macro-gen --novella-inst-gen --novella-schedule | FileCheck %s --check-prefix=MACRO

// linear -> linear at T in [1, 32] (d = 64; a shape bucket, its tiles planned for T = 32): the hidden [1, T, 64] is 2048 elements at T = 32, kept at the
// top of the scratchpad (65536 - 2048). The first linear writes it there and does not store it (its one
// reader is the second linear's x); both tile below it.
// CHECK-LABEL: func.func @chain
// CHECK: %[[H:.*]] = "novella.linear"(%arg0, {{.*}}novella.resident = {out = 63488 : i64, out_size = 2048 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 63488 : i64}
// CHECK: "novella.linear"(%[[H]], {{.*}}novella.resident = {x = 63488 : i64, x_size = 2048 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 63488 : i64}
// OFF-LABEL: func.func @chain
// OFF-NOT: novella.resident
// In the macros: the first writes each output tile into the region (a COPY, no STORE); the second's MATMULs
// read their x tiles there (no LOAD of its tensor 0, no COPY: it does not normalize x in place); the region
// is a buffer of both.
// MACRO-LABEL: func.func @chain
// MACRO: "novella.macro"
// MACRO-NOT: opcode = "STORE"
// MACRO: fn = "COPY"
// MACRO-NOT: opcode = "STORE"
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
