// RUN: novella-opt %s --novella-allocate --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-allocate --split-input-file --config %S/../tools/Inputs/small-sram.toml | FileCheck %s --check-prefix=SMALL
// RUN: novella-opt %s --novella-allocate=fixed-offsets=1 --split-input-file | FileCheck %s --check-prefix=FIXED

// Weights first (static offsets), then the input, then the intermediates at
// offsets affine in T. The scalar op reuses the linear's buffer, free once
// relu has read it. Each kernel op gets the SRAM budget of the config.
// CHECK-DAG: #[[$SIZE:.*]] = affine_map<()[s0] -> (s0 * 128 + 2080)>
// CHECK-DAG: #[[$W:.*]] = affine_map<()[s0] -> (0)>
// CHECK-DAG: #[[$B:.*]] = affine_map<()[s0] -> (2048)>
// CHECK-DAG: #[[$T1:.*]] = affine_map<()[s0] -> (s0 * 64 + 2080)>
// CHECK-DAG: #[[$T2:.*]] = affine_map<()[s0] -> (s0 * 96 + 2080)>
// CHECK-LABEL: func.func @chain
// CHECK-SAME: {novella.dram = affine_map<()[s0] -> (2080)>}
// CHECK-SAME: attributes {novella.dram_size = #[[$SIZE]]}
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w", novella.dram = #[[$W]]}
// CHECK: %[[B:.*]] = "novella.weight"() {name = "b", novella.dram = #[[$B]]}
// CHECK: %[[L:.*]] = "novella.linear"({{.*}}%[[W]], %[[B]]) {act = "none", novella.dram = #[[$T1]], novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}}
// CHECK: %[[R:.*]] = "novella.relu"(%[[L]]) {novella.dram = #[[$T2]], novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}}
// CHECK: %[[S:.*]] = "novella.scalar"(%[[R]]) {fn = "mul", novella.dram = #[[$T1]]
// CHECK: return %[[S]]
// SMALL-LABEL: func.func @chain
// SMALL: "novella.linear"{{.*}}novella.sram_budget = {acc = 1024 : i64, spad = 4096 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @chain(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    %1 = "novella.relu"(%0) : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    %2 = "novella.scalar"(%1) {fn = "mul", value = 2.0 : f32} : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %2 : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }
}

// -----

// Sizes are aligned to 16 elements with a ceildiv; a reshape aliases its
// input (same offset, no budget: it moves no data).
// CHECK-DAG: #[[$SIZE:.*]] = affine_map<()[s0] -> (((s0 * 3) ceildiv 16) * 32)>
// CHECK-DAG: #[[$OFF:.*]] = affine_map<()[s0] -> (((s0 * 3) ceildiv 16) * 16)>
// CHECK-LABEL: func.func @odd
// CHECK-SAME: {novella.dram = affine_map<()[s0] -> (0)>}
// CHECK-SAME: attributes {novella.dram_size = #[[$SIZE]]}
// CHECK: %[[R:.*]] = "novella.relu"(%{{.*}}) {novella.dram = #[[$OFF]], novella.sram_budget
// CHECK: "novella.reshape"(%[[R]]) {novella.dram = #[[$OFF]]} :
module attributes {novella.symbols = {s0 = ["T", 1, 100]}} {
  func.func @odd(%x: tensor<?x3xf32, affine_map<()[s0] -> (s0, 3)>>) -> tensor<?x1x3xf32, affine_map<()[s0] -> (s0, 1, 3)>> {
    %0 = "novella.relu"(%x) : (tensor<?x3xf32, affine_map<()[s0] -> (s0, 3)>>) -> tensor<?x3xf32, affine_map<()[s0] -> (s0, 3)>>
    %1 = "novella.reshape"(%0) : (tensor<?x3xf32, affine_map<()[s0] -> (s0, 3)>>) -> tensor<?x1x3xf32, affine_map<()[s0] -> (s0, 1, 3)>>
    return %1 : tensor<?x1x3xf32, affine_map<()[s0] -> (s0, 1, 3)>>
  }
}

// -----

// Two independent symbols (s0 past length P, s1 new length T): a freed [s0, 64]
// block is reused only where reuse is proved for every (s0, s1) >= 1: not by the
// [s1, 64] tensor (s1 may exceed s0), but by the later [s0, 64] one.
// CHECK-DAG: #[[$A:.*]] = affine_map<()[s0, s1] -> (s0 * 64 + s1 * 64)>
// CHECK-DAG: #[[$C:.*]] = affine_map<()[s0, s1] -> (s0 * 64 + s1 * 64 + s0 * 64 + s0 * 64)>
// CHECK-LABEL: func.func @two
// CHECK-SAME: {novella.dram = affine_map<()[s0, s1] -> (0)>}
// CHECK-SAME: {novella.dram = affine_map<()[s0, s1] -> (s0 * 64)>}
// CHECK: %[[R0:.*]] = "novella.relu"(%arg0) {novella.dram = #[[$A]],
// CHECK: %[[R1:.*]] = "novella.relu"(%[[R0]])
// CHECK: %[[R2:.*]] = "novella.relu"(%arg1) {novella.dram = #[[$C]],
// CHECK: "novella.relu"(%[[R1]]) {novella.dram = #[[$A]],
module attributes {novella.symbols = {s0 = ["P", 1, 1023], s1 = ["T", 1, 1024]}} {
  func.func @two(%p: tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>, %n: tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>) -> (tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>, tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>) {
    %0 = "novella.relu"(%p) : (tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>
    %1 = "novella.relu"(%0) : (tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>
    %2 = "novella.relu"(%n) : (tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>) -> tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>
    %3 = "novella.relu"(%2) : (tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>) -> tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>
    %4 = "novella.relu"(%1) : (tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>
    return %4, %3 : tensor<?x64xf32, affine_map<()[s0, s1] -> (s0, 64)>>, tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>
  }
}

// -----

// An op reading one value twice (cat(r, r)) frees r's block once: of the two
// [s0, 8] results that follow, only one may take it.
// CHECK-LABEL: func.func @twice
// CHECK: %[[R:.*]] = "novella.relu"(%arg0) {novella.dram = #[[$R:map[0-9]*]],
// CHECK: "novella.concat"(%[[R]], %[[R]])
// CHECK: "novella.relu"(%arg0) {novella.dram = #[[$R]],
// CHECK-NOT: novella.dram = #[[$R]],
// CHECK: return
module attributes {novella.symbols = {s0 = ["T", 1, 64]}} {
  func.func @twice(%x: tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> (tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>, tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>, tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) {
    %r = "novella.relu"(%x) : (tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>
    %c = "novella.concat"(%r, %r) {dim = 2 : i64} : (tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>, tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>
    %a = "novella.relu"(%x) : (tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>
    %b = "novella.relu"(%x) : (tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>
    return %c, %a, %b : tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>, tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>, tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>
  }
}

// -----

// fixed-offsets=1: every buffer is sized at the upper bound of T (x: 2048 * 64, the linear and relu
// results: 2048 * 32), so each offset is a constant: the program's addresses do not move with T.
// FIXED-DAG: #[[$SIZE:.*]] = affine_map<()[s0] -> (264224)>
// FIXED-DAG: #[[$T1:.*]] = affine_map<()[s0] -> (133152)>
// FIXED-DAG: #[[$T2:.*]] = affine_map<()[s0] -> (198688)>
// FIXED-LABEL: func.func @fixed
// FIXED-SAME: {novella.dram = affine_map<()[s0] -> (2080)>}
// FIXED-SAME: attributes {novella.dram_size = #[[$SIZE]]}
// FIXED: %[[L:.*]] = "novella.linear"({{.*}}novella.dram = #[[$T1]]
// FIXED: "novella.relu"(%[[L]]) {novella.dram = #[[$T2]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @fixed(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    %1 = "novella.relu"(%0) : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %1 : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }
}
