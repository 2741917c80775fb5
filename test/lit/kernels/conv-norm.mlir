// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// A vision patch embedding (frontend/linalg/conv.py) on a dynamic width W = s0: one patch row of
// 4x4 patches over 3 channels. The width is cut to whole patches, the row viewed as
// [1, C, kh, W/4, kw] and moved to [1, W/4, C, kh, kw] (row moves of kw elements, C * kh blocks),
// then one novella.linear over the W/4 patches (the matrix unit), its bias the conv's.
// CHECK-DAG: #[[MT:.*]] = affine_map<()[s0] -> (1, s0 floordiv 4, 3, 4, 4)>
// CHECK-DAG: #[[MY:.*]] = affine_map<()[s0] -> (1, s0 floordiv 4, 8)>
// CHECK-LABEL: func.func @patch_embed
// CHECK: %[[V:.*]] = "novella.reshape"
// CHECK: %[[T:.*]] = "novella.transpose"(%[[V]]) {perm = array<i64: 0, 3, 1, 2, 4>} {{.*}} -> tensor<1x?x3x4x4xf32, #[[MT]]>
// CHECK: %[[P:.*]] = "novella.reshape"(%[[T]])
// CHECK: %[[Y:.*]] = "novella.linear"(%[[P]], %{{.*}}, %{{.*}}) {{.*}} -> tensor<1x?x8xf32, #[[MY]]>
// CHECK: return %[[Y]]
// MACRO-DAG: #[[TGRID:.*]] = affine_map<()[s0] -> ((s0 floordiv 4) ceildiv 512)>
// MACRO-LABEL: func.func @patch_embed
// MACRO: grid = #[[TGRID]], kernel = "novella.transpose"
// MACRO: "novella.mma"() {{{.*}}k = 48 : i64, {{.*}}n = 8 : i64
// MACRO: kernel = "novella.linear"
#x = affine_map<()[s0] -> (1, 3, 4, s0)>
#cut = affine_map<()[s0] -> (1, 3, 4, (s0 floordiv 4) * 4)>
#view = affine_map<()[s0] -> (1, 3, 4, s0 floordiv 4, 4)>
#rows = affine_map<()[s0] -> (1, s0 floordiv 4, 48)>
module attributes {novella.symbols = {s0 = ["W", 4, 256]}} {
  func.func @patch_embed(%x: tensor<1x3x4x?xf32, #x>, %w: tensor<8x48xf32>, %b: tensor<8xf32>) -> tensor<1x?x8xf32> {
    %0 = "novella.slice"(%x) {dim = 3 : i64, start = 0 : i64} : (tensor<1x3x4x?xf32, #x>) -> tensor<1x3x4x?xf32, #cut>
    %1 = "novella.reshape"(%0) : (tensor<1x3x4x?xf32, #cut>) -> tensor<1x3x4x?x4xf32, #view>
    %2 = "novella.transpose"(%1) {perm = array<i64: 0, 3, 1, 2, 4>} : (tensor<1x3x4x?x4xf32, #view>) -> tensor<1x?x3x4x4xf32>
    %3 = "novella.reshape"(%2) : (tensor<1x?x3x4x4xf32>) -> tensor<1x?x48xf32, #rows>
    %4 = "novella.linear"(%3, %w, %b) {act = "none"} : (tensor<1x?x48xf32, #rows>, tensor<8x48xf32>, tensor<8xf32>) -> tensor<1x?x8xf32>
    return %4 : tensor<1x?x8xf32>
  }
}

// -----

// group_norm (frontend/lowering/nn.py) with 2 groups of 4 channels over a `?` length T = s0: the groups
// are [1, 2, 4 * s0] rows, summed over their `?` last dim (column chunks, the last one partial) and
// divided by the count 4 * s0, itself computed on the NPU (a sum of a row of ones sliced to it).
// CHECK-DAG: #[[MG:.*]] = affine_map<()[s0] -> (1, 2, s0 * 4)>
// CHECK-LABEL: func.func @group_norm
// CHECK: %[[G:.*]] = "novella.reshape"(%{{.*}}) {{.*}} -> tensor<1x2x?xf32, #[[MG]]>
// CHECK: %[[N:.*]] = "novella.reshape"(%{{.*}}) : (tensor<1x1xf32>) -> tensor<f32>
// CHECK: %[[S:.*]] = "novella.reduce"(%[[G]]) {fn = "sum"} : (tensor<1x2x?xf32, #[[MG]]>) -> tensor<1x2x1xf32>
// CHECK: %[[M:.*]] = "novella.div"(%[[S]], %[[N]])
// CHECK: %[[D:.*]] = "novella.sub"(%[[G]], %[[M]]) {{.*}} -> tensor<1x2x?xf32, #[[MG]]>
// CHECK: "novella.math"(%{{.*}}) {fn = "rsqrt"}
// MACRO-DAG: #[[COLS:.*]] = affine_map<(d0, d1)[s0] -> (512, d1 * -512 + s0 * 4)>
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (1, (s0 * 4) ceildiv 512)>
// MACRO-LABEL: func.func @group_norm
// MACRO: "novella.vop"() {a = "b0", {{.*}}fn = "ROWSUM", rows = 1 : i64}
// MACRO: "novella.vop"() {a = "b0", {{.*}}cols = #[[COLS]], {{.*}}fn = "ROWSUM", rows = 2 : i64}
// MACRO: grid = #[[GRID]], kernel = "novella.reduce"
#t = affine_map<()[s0] -> (1, 8, s0)>
#g = affine_map<()[s0] -> (1, 2, s0 * 4)>
#n = affine_map<()[s0] -> (1, s0 * 4)>
module attributes {novella.symbols = {s0 = ["T", 2, 64]}} {
  func.func @group_norm(%x: tensor<1x8x?xf32, #t>, %ones: tensor<1x256xf32>) -> tensor<1x8x?xf32, #t> {
    %0 = "novella.reshape"(%x) : (tensor<1x8x?xf32, #t>) -> tensor<1x2x?xf32, #g>
    %1 = "novella.slice"(%ones) {dim = 1 : i64, start = 0 : i64} : (tensor<1x256xf32>) -> tensor<1x?xf32, #n>
    %2 = "novella.reduce"(%1) {fn = "sum"} : (tensor<1x?xf32, #n>) -> tensor<1x1xf32>
    %3 = "novella.reshape"(%2) : (tensor<1x1xf32>) -> tensor<f32>
    %4 = "novella.reduce"(%0) {fn = "sum"} : (tensor<1x2x?xf32, #g>) -> tensor<1x2x1xf32>
    %5 = "novella.div"(%4, %3) : (tensor<1x2x1xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %6 = "novella.sub"(%0, %5) : (tensor<1x2x?xf32, #g>, tensor<1x2x1xf32>) -> tensor<1x2x?xf32>
    %7 = "novella.mul"(%6, %6) : (tensor<1x2x?xf32>, tensor<1x2x?xf32>) -> tensor<1x2x?xf32>
    %8 = "novella.reduce"(%7) {fn = "sum"} : (tensor<1x2x?xf32>) -> tensor<1x2x1xf32>
    %9 = "novella.div"(%8, %3) : (tensor<1x2x1xf32>, tensor<f32>) -> tensor<1x2x1xf32>
    %10 = "novella.scalar"(%9) {fn = "add", value = 9.99999974E-6 : f32} : (tensor<1x2x1xf32>) -> tensor<1x2x1xf32>
    %11 = "novella.math"(%10) {fn = "rsqrt"} : (tensor<1x2x1xf32>) -> tensor<1x2x1xf32>
    %12 = "novella.mul"(%6, %11) : (tensor<1x2x?xf32>, tensor<1x2x1xf32>) -> tensor<1x2x?xf32>
    %13 = "novella.reshape"(%12) : (tensor<1x2x?xf32>) -> tensor<1x8x?xf32, #t>
    return %13 : tensor<1x8x?xf32, #t>
  }
}
