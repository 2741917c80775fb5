// RUN: novella-opt %s --novella-buckets --split-input-file --verify-diagnostics | FileCheck %s
// RUN: novella-opt %s --novella-buckets=enable=0 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: novella-opt %s --novella-buckets=min-gain=90 --split-input-file | FileCheck %s --check-prefix=GAIN90
// RUN: novella-opt %s --novella-buckets --novella-tile --split-input-file | FileCheck %s --check-prefix=TILE
// RUN: novella-opt %s --novella-buckets=max-buckets=1 --split-input-file | FileCheck %s --check-prefix=ONE

// fc1 of an MLP (384 -> 1536, gelu) over T in [1, 2048]. Planned for the nominal
// length the linear keeps its weight slab resident (with two accumulator halves, its
// GELU epilogue deferred under the next block's MATMULs); for T <= 512 the cost model
// prefers keeping the input rows resident and streaming weight tiles (input-stationary,
// the deferred GELU spread over the next block's k steps), and up to 64 tiles planned
// for 64 beat those planned for 512: two nested buckets, [1, 64] and [65, 512], and the
// generic program above. (The `?` case: T is symbolic; the decision is the module attribute.)
// CHECK-LABEL: module attributes
// CHECK-SAME: novella.buckets = [{hi = 64 : i64, lo = 1 : i64, plan = [64], reason = "shape bucket: tiles planned for T = 64 instead of 512; the cost model predicts {{.*}} fewer cycles at T = 1, 32, 64", symbol = 0 : i64},
// CHECK-SAME: {hi = 512 : i64, lo = 65 : i64, plan = [512], reason = "shape bucket: tiles planned for T = 512 instead of 4096; the cost model predicts {{.*}} fewer cycles at T = 1, 256, 512", symbol = 0 : i64},
// CHECK-SAME: {hi = 2048 : i64, lo = 513 : i64, plan = [4096], reason = "generic", symbol = 0 : i64}]
// CHECK: func.func @fc1(%{{.*}}: tensor<1x?x384xf32
// ONE-LABEL: module attributes
// ONE-SAME: novella.buckets = [{hi = 512 : i64, lo = 1 : i64, plan = [512], reason = "shape bucket: tiles planned for T = 512 instead of 4096;
// ONE-SAME: {hi = 2048 : i64, lo = 513 : i64, plan = [4096], reason = "generic", symbol = 0 : i64}]
// With a split, this module stays the generic program (the pipeline compiles each
// bucket from a copy whose bounds are the bucket's and novella.plan_lengths its plan).
// TILE-LABEL: func.func @fc1
// TILE: novella.tiles = {acc_slots = 2 : i64, tk = 384 : i64, tm = 16 : i64, tn = 96 : i64, ws = 1 : i64}
// OFF-NOT: novella.buckets
// OFF: func.func @fc1
// GAIN90-NOT: novella.buckets
// GAIN90: func.func @fc1
#x = affine_map<()[s0] -> (1, s0, 384)>
#y = affine_map<()[s0] -> (1, s0, 1536)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @fc1(%x: tensor<1x?x384xf32, #x> {novella.dram = affine_map<()[s0] -> (591360)>}) -> tensor<1x?x1536xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1536x384xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (589824)>} : () -> tensor<1536xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 384 + 591360)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, #x>, tensor<1536x384xf32>, tensor<1536xf32>) -> tensor<1x?x1536xf32, #y>
    return %0 : tensor<1x?x1536xf32, #y>
  }
}

// -----

// The edge depends on the model and the Target, not on the bounds: T in [1, 16]
// lies inside the first bucket, so its one program is planned for T = 64 as well.
// CHECK-LABEL: module attributes
// CHECK-SAME: novella.buckets = [{hi = 16 : i64, lo = 1 : i64, plan = [64], reason = "shape bucket: tiles planned for T = 64
// CHECK-SAME: novella.plan_lengths = [64]
// CHECK-NOT: generic
// CHECK: func.func @short
// TILE-LABEL: func.func @short
// TILE: novella.tiles = {acc_slots = 2 : i64, tk = 384 : i64, tm = 64 : i64, tn = 16 : i64, ws = 2 : i64}
#x = affine_map<()[s0] -> (1, s0, 384)>
#y = affine_map<()[s0] -> (1, s0, 1536)>
module attributes {novella.symbols = {s0 = ["T", 1, 16]}} {
  func.func @short(%x: tensor<1x?x384xf32, #x> {novella.dram = affine_map<()[s0] -> (591360)>}) -> tensor<1x?x1536xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1536x384xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (589824)>} : () -> tensor<1536xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 384 + 591360)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, #x>, tensor<1536x384xf32>, tensor<1536xf32>) -> tensor<1x?x1536xf32, #y>
    return %0 : tensor<1x?x1536xf32, #y>
  }
}

// -----

// T in [65, 512] lies in the second bucket: planned for 512, input-stationary with k tiles
// of 128 (three k steps per output block), the GELU epilogue of each block deferred to the
// next one (two accumulator halves) is spread over its three k steps (`spread = 1`): the
// bias add and the GELU in place in the block's accumulator half, its last MUL into the
// output tile with the STORE on the last k step (the VECs beside three MATMULs, not one).
// CHECK-LABEL: module attributes
// CHECK-SAME: novella.buckets = [{hi = 512 : i64, lo = 65 : i64, plan = [512]
// CHECK-SAME: novella.plan_lengths = [512]
// CHECK: func.func @mid
// TILE-LABEL: func.func @mid
// TILE: novella.tiles = {acc_slots = 2 : i64, spread = 1 : i64, tk = 128 : i64, tm = 128 : i64, tn = 16 : i64, ws = 2 : i64}
#x = affine_map<()[s0] -> (1, s0, 384)>
#y = affine_map<()[s0] -> (1, s0, 1536)>
module attributes {novella.symbols = {s0 = ["T", 65, 512]}} {
  func.func @mid(%x: tensor<1x?x384xf32, #x> {novella.dram = affine_map<()[s0] -> (591360)>}) -> tensor<1x?x1536xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1536x384xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (589824)>} : () -> tensor<1536xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 384 + 591360)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, #x>, tensor<1536x384xf32>, tensor<1536xf32>) -> tensor<1x?x1536xf32, #y>
    return %0 : tensor<1x?x1536xf32, #y>
  }
}

// -----

// A static program has no symbol to split.
// CHECK-LABEL: module {
// CHECK-NOT: novella.buckets
// CHECK: func.func @static
module {
  func.func @static(%x: tensor<1x8x384xf32> {novella.dram = affine_map<() -> (591360)>}) -> tensor<1x8x1536xf32> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<() -> (0)>} : () -> tensor<1536x384xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<() -> (589824)>} : () -> tensor<1536xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "gelu", novella.dram = affine_map<() -> (594432)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x8x384xf32>, tensor<1536x384xf32>, tensor<1536xf32>) -> tensor<1x8x1536xf32>
    return %0 : tensor<1x8x1536xf32>
  }
}
