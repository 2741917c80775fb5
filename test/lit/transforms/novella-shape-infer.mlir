// RUN: novella-opt %s --novella-shape-infer --split-input-file --verify-diagnostics | FileCheck %s

// The symbolic length flows from the argument through linear and gelu to the
// function result: every `?` gets the affine map of its size.
// CHECK-DAG: #[[$X:.*]] = affine_map<()[s0] -> (1, s0, 64)>
// CHECK-DAG: #[[$Y:.*]] = affine_map<()[s0] -> (1, s0, 32)>
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[ARG:.*]]: tensor<1x?x64xf32, #[[$X]]>) -> tensor<1x?x32xf32, #[[$Y]]>
// CHECK: %[[L:.*]] = "novella.linear"(%[[ARG]], {{.*}}) -> tensor<1x?x32xf32, #[[$Y]]>
// CHECK: %[[G:.*]] = "novella.gelu"(%[[L]]) : (tensor<1x?x32xf32, #[[$Y]]>) -> tensor<1x?x32xf32, #[[$Y]]>
// CHECK: return %[[G]] : tensor<1x?x32xf32, #[[$Y]]>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @mlp(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32>
    %1 = "novella.gelu"(%0) : (tensor<1x?x32xf32>) -> tensor<1x?x32xf32>
    return %1 : tensor<1x?x32xf32>
  }
}

// -----

// A stride-2 convolution halves the length: floor((T + 2*pad - k) / 2) + 1,
// and the transpose moves that size to dim 1.
// CHECK-DAG: #[[$CONV:.*]] = affine_map<()[s0] -> (1, 384, (s0 - 1) floordiv 2 + 1)>
// CHECK-DAG: #[[$TR:.*]] = affine_map<()[s0] -> (1, (s0 - 1) floordiv 2 + 1, 384)>
// CHECK-LABEL: func.func @conv_stride2
// CHECK-SAME: -> tensor<1x?x384xf32, #[[$TR]]>
// CHECK: %[[C:.*]] = "novella.conv1d"({{.*}}) {act = "none", layout = "ncw", padding = 1 : i64, stride = 2 : i64} : ({{.*}}) -> tensor<1x384x?xf32, #[[$CONV]]>
// CHECK: %[[T:.*]] = "novella.transpose"(%[[C]]) {{.*}} -> tensor<1x?x384xf32, #[[$TR]]>
// CHECK: return %[[T]]
module attributes {novella.symbols = {s0 = ["T", 3, 3000]}} {
  func.func @conv_stride2(%x: tensor<1x80x?xf32, affine_map<()[s0] -> (1, 80, s0)>>) -> tensor<1x?x384xf32> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<384x80x3xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<384xf32>
    %0 = "novella.conv1d"(%x, %w, %b) {stride = 2 : i64, padding = 1 : i64, layout = "ncw", act = "none"} : (tensor<1x80x?xf32, affine_map<()[s0] -> (1, 80, s0)>>, tensor<384x80x3xf32>, tensor<384xf32>) -> tensor<1x384x?xf32>
    %1 = "novella.transpose"(%0) {perm = array<i64: 0, 2, 1>} : (tensor<1x384x?xf32>) -> tensor<1x?x384xf32>
    return %1 : tensor<1x?x384xf32>
  }
}

// -----

// Broadcasting a static row keeps the symbolic rows; q @ k^T is [T, T].
// CHECK-DAG: #[[$ROWS:.*]] = affine_map<()[s0] -> (s0, 64)>
// CHECK-DAG: #[[$SQ:.*]] = affine_map<()[s0] -> (s0, s0)>
// CHECK-LABEL: func.func @scores
// CHECK: %[[A:.*]] = "novella.add"({{.*}}) : (tensor<?x64xf32, #[[$ROWS]]>, tensor<64xf32>) -> tensor<?x64xf32, #[[$ROWS]]>
// CHECK: %[[S:.*]] = "novella.matmul"(%[[A]], {{.*}}) {transpose_rhs = true} : {{.*}} -> tensor<?x?xf32, #[[$SQ]]>
// CHECK: "novella.softmax"(%[[S]]) {safe = false} : (tensor<?x?xf32, #[[$SQ]]>) -> tensor<?x?xf32, #[[$SQ]]>
module attributes {novella.symbols = {s0 = ["T", 1, 512]}} {
  func.func @scores(%q: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %k: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %bias: tensor<64xf32>) -> tensor<?x?xf32> {
    %0 = "novella.add"(%q, %bias) : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<64xf32>) -> tensor<?x64xf32>
    %1 = "novella.matmul"(%0, %k) {transpose_rhs = true} : (tensor<?x64xf32>, tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x?xf32>
    %2 = "novella.softmax"(%1) : (tensor<?x?xf32>) -> tensor<?x?xf32>
    return %2 : tensor<?x?xf32>
  }
}

// -----

// Plain MLIR: a `?` argument dim without an encoding gets a new symbol with the
// bounds of the pass options (here the defaults [1, 2048]); the add requires its
// operands' lengths to be equal, so %x and %y share one symbol.
// CHECK: module attributes {novella.symbols = {s0 = ["T", 1, 512], s1 = ["T1", 1, 2048]}}
// CHECK-LABEL: func.func @plain
// CHECK-SAME: (%[[X:.*]]: tensor<?x64xf32, #[[$P:.*]]>, %[[Y:.*]]: tensor<?x64xf32, #[[$P]]>) -> tensor<?x64xf32, #[[$P]]>
// CHECK: "novella.add"(%[[X]], %[[Y]])
module attributes {novella.symbols = {s0 = ["T", 1, 512]}} {
  func.func @plain(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> tensor<?x64xf32> {
    %0 = "novella.add"(%x, %y) : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
    return %0 : tensor<?x64xf32>
  }
}

// -----

// A static result dim that contradicts the shape rule is rejected.
module attributes {novella.symbols = {s0 = ["T", 1, 512]}} {
  func.func @static_mismatch(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %y: tensor<64xf32>) -> tensor<3x64xf32> {
    // expected-error @+1 {{result dim 0 is 3 but the shape rule gives s0}}
    %0 = "novella.add"(%x, %y) : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<64xf32>) -> tensor<3x64xf32>
    return %0 : tensor<3x64xf32>
  }
}

// -----

// Two independent symbols: the result of T queries against P keys is
// [1, s1, s0]; equal sizes are recognized as expressions, not as text.
// CHECK-LABEL: func.func @scores
// CHECK: "novella.matmul"(%arg0, %arg1) {transpose_rhs = true} : (tensor<1x?x64xf32, #map>, tensor<1x?x64xf32, #map1>) -> tensor<1x?x?xf32, #map2>
module attributes {novella.symbols = {s0 = ["P", 1, 1023], s1 = ["T", 1, 1024]}} {
  func.func @scores(%q: tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s1, 64)>>, %k: tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s0, 64)>>) -> tensor<1x?x?xf32, affine_map<()[s0, s1] -> (1, s1, s0)>> {
    %0 = "novella.matmul"(%q, %k) {transpose_rhs = true} : (tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s1, 64)>>, tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s0, 64)>>) -> tensor<1x?x?xf32, affine_map<()[s0, s1] -> (1, s1, s0)>>
    return %0 : tensor<1x?x?xf32, affine_map<()[s0, s1] -> (1, s1, s0)>>
  }
}

// -----

// A pad to a multiple of 4 windows then a view into windows: the element counts are equal at every
// length (T + (-T) mod 4 is a multiple of 4), which `symbolic.equal` proves by checking one period.
// CHECK-DAG: #[[$PAD:.*]] = affine_map<()[s0] -> (1, s0 + (-s0) mod 4, 8)>
// CHECK-DAG: #[[$WIN:.*]] = affine_map<()[s0] -> (1, (s0 + (-s0) mod 4) floordiv 4, 4, 8)>
// CHECK-LABEL: func.func @windows
// CHECK: %[[R:.*]] = "novella.reshape"(%{{.*}}) : (tensor<1x?x8xf32, #[[$PAD]]>) -> tensor<1x?x4x8xf32, #[[$WIN]]>
// CHECK: return %[[R]]
module attributes {novella.symbols = {s0 = ["T", 1, 40]}} {
  func.func @windows(%x: tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0 + (-s0) mod 4, 8)>>) -> tensor<1x?x4x8xf32, affine_map<()[s0] -> (1, (s0 + (-s0) mod 4) floordiv 4, 4, 8)>> {
    %0 = "novella.reshape"(%x) : (tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0 + (-s0) mod 4, 8)>>) -> tensor<1x?x4x8xf32, affine_map<()[s0] -> (1, (s0 + (-s0) mod 4) floordiv 4, 4, 8)>>
    return %0 : tensor<1x?x4x8xf32, affine_map<()[s0] -> (1, (s0 + (-s0) mod 4) floordiv 4, 4, 8)>>
  }
}

// -----

// The same view of a length that need not be a multiple of 4 changes the element count.
module attributes {novella.symbols = {s0 = ["T", 1, 40]}} {
  func.func @not_windows(%x: tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> tensor<1x?x4x8xf32, affine_map<()[s0] -> (1, s0 floordiv 4, 4, 8)>> {
    // expected-error @+1 {{reshape changes the element count}}
    %0 = "novella.reshape"(%x) : (tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>) -> tensor<1x?x4x8xf32, affine_map<()[s0] -> (1, s0 floordiv 4, 4, 8)>>
    return %0 : tensor<1x?x4x8xf32, affine_map<()[s0] -> (1, s0 floordiv 4, 4, 8)>>
  }
}
