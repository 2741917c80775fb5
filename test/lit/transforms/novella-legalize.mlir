// RUN: novella-opt %s --novella-legalize --split-input-file | FileCheck %s

// An activation after a single-use linear folds into the linear's epilogue.
// CHECK-LABEL: func.func @fuse_relu
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xf32
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w"}
// CHECK: %[[B:.*]] = "novella.weight"() {name = "b"}
// CHECK: %[[Y:.*]] = "novella.linear"(%[[X]], %[[W]], %[[B]]) {act = "relu"}
// CHECK-NOT: novella.relu
// CHECK: return %[[Y]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @fuse_relu(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>
    %1 = "novella.relu"(%0) : (tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>) -> tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>
    return %1 : tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>
  }
}

// -----

// A linear with two users keeps its activation separate.
// CHECK-LABEL: func.func @two_users
// CHECK: %[[L:.*]] = "novella.linear"({{.*}}) {act = "none"}
// CHECK: "novella.gelu"(%[[L]])
// CHECK: "novella.add"
func.func @two_users(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
  %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<4x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  %1 = "novella.gelu"(%0) : (tensor<4x32xf32>) -> tensor<4x32xf32>
  %2 = "novella.add"(%0, %1) : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %2 : tensor<4x32xf32>
}

// -----

// GELU fuses too, on a 3-D input whose length is symbolic; a second
// activation after a fused one stays separate.
// CHECK-DAG: #[[$Y:.*]] = affine_map<()[s0] -> (1, s0, 32)>
// CHECK-LABEL: func.func @fuse_gelu_then_relu
// CHECK: %[[L:.*]] = "novella.linear"({{.*}}) {act = "gelu"} : ({{.*}}) -> tensor<1x?x32xf32, #[[$Y]]>
// CHECK-NOT: novella.gelu
// CHECK: %[[R:.*]] = "novella.relu"(%[[L]])
// CHECK: return %[[R]]
module attributes {novella.symbols = {s0 = ["T", 1, 1500]}} {
  func.func @fuse_gelu_then_relu(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    %1 = "novella.gelu"(%0) : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    %2 = "novella.relu"(%1) : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %2 : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }
}

// -----

// Two transposes that keep a last dim of size 1 stay two: composed, they would be one row move of
// one-element blocks (12 per row here; Mamba2's head_dim 1 made 32768, which no macro unrolls).
// CHECK-LABEL: func.func @unit_last_transposes_stay
// CHECK-SAME: (%[[X:.*]]: tensor<4x?x3x1xf32
// CHECK: %[[A:.*]] = "novella.transpose"(%[[X]]) {perm = array<i64: 1, 0, 2, 3>}
// CHECK: %[[B:.*]] = "novella.transpose"(%[[A]]) {perm = array<i64: 0, 2, 1, 3>}
// CHECK: return %[[B]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @unit_last_transposes_stay(%x: tensor<4x?x3x1xf32, affine_map<()[s0] -> (4, s0, 3, 1)>>) -> tensor<?x3x4x1xf32, affine_map<()[s0] -> (s0, 3, 4, 1)>> {
    %0 = "novella.transpose"(%x) {perm = array<i64: 1, 0, 2, 3>} : (tensor<4x?x3x1xf32, affine_map<()[s0] -> (4, s0, 3, 1)>>) -> tensor<?x4x3x1xf32, affine_map<()[s0] -> (s0, 4, 3, 1)>>
    %1 = "novella.transpose"(%0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x4x3x1xf32, affine_map<()[s0] -> (s0, 4, 3, 1)>>) -> tensor<?x3x4x1xf32, affine_map<()[s0] -> (s0, 3, 4, 1)>>
    return %1 : tensor<?x3x4x1xf32, affine_map<()[s0] -> (s0, 3, 4, 1)>>
  }
}

// -----

// With a last dim of 8 the same two compose into one row move.
// CHECK-LABEL: func.func @row_transposes_compose
// CHECK-SAME: (%[[X:.*]]: tensor<4x?x3x8xf32
// CHECK: %[[A:.*]] = "novella.transpose"(%[[X]]) {perm = array<i64: 1, 2, 0, 3>}
// CHECK-NEXT: return %[[A]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @row_transposes_compose(%x: tensor<4x?x3x8xf32, affine_map<()[s0] -> (4, s0, 3, 8)>>) -> tensor<?x3x4x8xf32, affine_map<()[s0] -> (s0, 3, 4, 8)>> {
    %0 = "novella.transpose"(%x) {perm = array<i64: 1, 0, 2, 3>} : (tensor<4x?x3x8xf32, affine_map<()[s0] -> (4, s0, 3, 8)>>) -> tensor<?x4x3x8xf32, affine_map<()[s0] -> (s0, 4, 3, 8)>>
    %1 = "novella.transpose"(%0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x4x3x8xf32, affine_map<()[s0] -> (s0, 4, 3, 8)>>) -> tensor<?x3x4x8xf32, affine_map<()[s0] -> (s0, 3, 4, 8)>>
    return %1 : tensor<?x3x4x8xf32, affine_map<()[s0] -> (s0, 3, 4, 8)>>
  }
}
