// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --split-input-file | FileCheck %s --check-prefix=LEGAL
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// Whisper's strided conv: the output length is a floordiv of the symbol; legalize makes it
// channels-last between two transposes and fuses the gelu; the kernel loads the
// (tm - 1) * 2 + 3 input rows of a tile from row 2 * 256 * d1 - 1 (the padding row).
// CHECK-DAG: #[[IN:.*]] = affine_map<()[s0] -> (1, 16, s0)>
// CHECK-DAG: #[[OUT:.*]] = affine_map<()[s0] -> (1, 32, (s0 - 1) floordiv 2 + 1)>
// CHECK-LABEL: func.func @conv_stride2
// CHECK-SAME: (%[[X:.*]]: tensor<1x16x?xf32, #[[IN]]>) -> tensor<1x32x?xf32, #[[OUT]]>
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w"}
// CHECK: %[[B:.*]] = "novella.weight"() {name = "b"}
// CHECK: %[[C:.*]] = "novella.conv1d"(%[[X]], %[[W]], %[[B]]) {act = "none", layout = "ncw", padding = 1 : i64, stride = 2 : i64} : ({{.*}}) -> tensor<1x32x?xf32, #[[OUT]]>
// CHECK: %[[G:.*]] = "novella.gelu"(%[[C]])
// CHECK: return %[[G]]
// LEGAL-DAG: #[[NWC:.*]] = affine_map<()[s0] -> (1, (s0 - 1) floordiv 2 + 1, 32)>
// LEGAL-LABEL: func.func @conv_stride2
// LEGAL: %[[T:.*]] = "novella.transpose"(%{{.*}}) {perm = array<i64: 0, 2, 1>}
// LEGAL: %[[C:.*]] = "novella.conv1d"(%[[T]], %{{.*}}, %{{.*}}) {act = "gelu", layout = "nwc", padding = 1 : i64, stride = 2 : i64} : ({{.*}}) -> tensor<1x?x32xf32, #[[NWC]]>
// LEGAL-NOT: novella.gelu
// LEGAL: %[[R:.*]] = "novella.transpose"(%[[C]]) {perm = array<i64: 0, 2, 1>}
// LEGAL: return %[[R]]
// MACRO-DAG: #[[START:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 512 - 1)>
// MACRO-DAG: #[[XROWS:.*]] = affine_map<(d0, d1)[s0] -> (513, (d1 * -256 + (s0 - 1) floordiv 2 + 1) * 2 + 1)>
// MACRO-DAG: #[[OROWS:.*]] = affine_map<(d0, d1)[s0] -> (256, d1 * -256 + (s0 - 1) floordiv 2 + 1)>
// MACRO-LABEL: func.func @conv_stride2
// MACRO: kernel = "novella.transpose"
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = 16 : i64, {{.*}}row_start = #[[START]], row_step = 1 : i64, rows = #[[XROWS]]
// Tap k is the SRAM view at input row k (lhs_offset = k * Cin = 16k) with row stride
// stride * Cin = 32, times weight slab k (rhs_offset = k * tn * Cin = 512k); taps 1 and 2
// accumulate onto tap 0.
// MACRO-NEXT: "novella.mma"() {a_stride = 32 : i64, {{.*}}accumulate = 0 : i64, b_stride = 16 : i64, k = 16 : i64, lhs = "x", lhs_offset = 0 : i64, m = #[[OROWS]], n = 32 : i64, rhs = "w", rhs_offset = 0 : i64, transpose_b = 1 : i64}
// MACRO-NEXT: "novella.mma"() {a_stride = 32 : i64, {{.*}}accumulate = 1 : i64, b_stride = 16 : i64, k = 16 : i64, lhs = "x", lhs_offset = 16 : i64, m = #[[OROWS]], n = 32 : i64, rhs = "w", rhs_offset = 512 : i64, transpose_b = 1 : i64}
// MACRO-NEXT: "novella.mma"() {a_stride = 32 : i64, {{.*}}accumulate = 1 : i64, b_stride = 16 : i64, k = 16 : i64, lhs = "x", lhs_offset = 32 : i64, m = #[[OROWS]], n = 32 : i64, rhs = "w", rhs_offset = 1024 : i64, transpose_b = 1 : i64}
// MACRO: "novella.vop"() {{{.*}}fn = "ERF", rows = #[[OROWS]]}
// tm = 256 is the largest of the conv kernel's row tiles (256, 128, ..., 8) and tn = 32 all the
// output channels: the kernel keeps the fitting (tm, tn) with the largest tm * tn.
// MACRO: kernel = "novella.conv1d", {{.*}}tiles = {tm = 256 : i64, tn = 32 : i64}}
module attributes {novella.symbols = {s0 = ["T", 2, 3000]}} {
  func.func @conv_stride2(%x: tensor<1x16x?xf32, affine_map<()[s0] -> (1, 16, s0)>>) -> tensor<1x32x?xf32> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x16x3xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.conv1d"(%x, %w, %b) {act = "none", layout = "ncw", padding = 1 : i64, stride = 2 : i64} : (tensor<1x16x?xf32, affine_map<()[s0] -> (1, 16, s0)>>, tensor<32x16x3xf32>, tensor<32xf32>) -> tensor<1x32x?xf32>
    %1 = "novella.gelu"(%0) : (tensor<1x32x?xf32>) -> tensor<1x32x?xf32>
    return %1 : tensor<1x32x?xf32>
  }
}

// -----

// Two convs in NCW with a gelu between: after legalize only the input transpose
// remains, and a final permute(0, 2, 1) to channels-last cancels the last one.
// CHECK-DAG: #[[L1:.*]] = affine_map<()[s0] -> (1, 8, s0)>
// CHECK-DAG: #[[L2:.*]] = affine_map<()[s0] -> (1, 8, (s0 - 1) floordiv 2 + 1)>
// CHECK-LABEL: func.func @conv_stem
// CHECK: "novella.conv1d"({{.*}}) -> tensor<1x8x?xf32, #[[L1]]>
// CHECK: "novella.conv1d"({{.*}}) -> tensor<1x8x?xf32, #[[L2]]>
// LEGAL-LABEL: func.func @conv_stem
// LEGAL-SAME: (%[[X:.*]]: tensor<1x4x?xf32
// LEGAL: %[[T:.*]] = "novella.transpose"(%[[X]]) {perm = array<i64: 0, 2, 1>}
// LEGAL: %[[C1:.*]] = "novella.conv1d"(%[[T]], {{.*}}) {act = "gelu", layout = "nwc", padding = 1 : i64, stride = 1 : i64}
// LEGAL: %[[C2:.*]] = "novella.conv1d"(%[[C1]], {{.*}}) {act = "gelu", layout = "nwc", padding = 1 : i64, stride = 2 : i64}
// LEGAL-NOT: novella.transpose
// LEGAL: return %[[C2]]
// Three macros: the input transpose (tr = all 4 channels, tc = 128, the largest identity block
// that fits), then each conv loads its (tm - 1) * stride + 3 input rows per 256-row tile
// starting one row early (padding 1): 258 rows for stride 1, 513 for stride 2, fewer at the end.
// MACRO-DAG: #[[X1:.*]] = affine_map<(d0, d1)[s0] -> (258, d1 * -256 + s0 + 2)>
// MACRO-DAG: #[[S1:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 256 - 1)>
// MACRO-DAG: #[[X2:.*]] = affine_map<(d0, d1)[s0] -> (513, (d1 * -256 + (s0 - 1) floordiv 2 + 1) * 2 + 1)>
// MACRO-DAG: #[[S2:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 512 - 1)>
// MACRO-LABEL: func.func @conv_stem
// MACRO: kernel = "novella.transpose", {{.*}}tiles = {tc = 128 : i64, tr = 4 : i64}
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = 4 : i64, {{.*}}row_start = #[[S1]], row_step = 1 : i64, rows = #[[X1]]
// MACRO: kernel = "novella.conv1d", {{.*}}tiles = {tm = 256 : i64, tn = 8 : i64}}
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = 8 : i64, {{.*}}row_start = #[[S2]], row_step = 1 : i64, rows = #[[X2]]
// MACRO: kernel = "novella.conv1d", {{.*}}tiles = {tm = 256 : i64, tn = 8 : i64}}
// MACRO-NOT: kernel = "novella.transpose"
module attributes {novella.symbols = {s0 = ["T", 2, 3000]}} {
  func.func @conv_stem(%x: tensor<1x4x?xf32, affine_map<()[s0] -> (1, 4, s0)>>) -> tensor<1x?x8xf32> {
    %w1 = "novella.weight"() {name = "w1"} : () -> tensor<8x4x3xf32>
    %b1 = "novella.weight"() {name = "b1"} : () -> tensor<8xf32>
    %w2 = "novella.weight"() {name = "w2"} : () -> tensor<8x8x3xf32>
    %b2 = "novella.weight"() {name = "b2"} : () -> tensor<8xf32>
    %0 = "novella.conv1d"(%x, %w1, %b1) {act = "none", layout = "ncw", padding = 1 : i64, stride = 1 : i64} : (tensor<1x4x?xf32, affine_map<()[s0] -> (1, 4, s0)>>, tensor<8x4x3xf32>, tensor<8xf32>) -> tensor<1x8x?xf32>
    %1 = "novella.gelu"(%0) : (tensor<1x8x?xf32>) -> tensor<1x8x?xf32>
    %2 = "novella.conv1d"(%1, %w2, %b2) {act = "none", layout = "ncw", padding = 1 : i64, stride = 2 : i64} : (tensor<1x8x?xf32>, tensor<8x8x3xf32>, tensor<8xf32>) -> tensor<1x8x?xf32>
    %3 = "novella.gelu"(%2) : (tensor<1x8x?xf32>) -> tensor<1x8x?xf32>
    %4 = "novella.transpose"(%3) {perm = array<i64: 0, 2, 1>} : (tensor<1x8x?xf32>) -> tensor<1x?x8xf32>
    return %4 : tensor<1x?x8xf32>
  }
}

// -----

// layer_norm over a static last dim of a `?`-row tensor: two ROWSUMs, a COL-broadcast
// normalization, ROW-broadcast affine weight and bias, the result stored from `sq`.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32, #[[M:.*]]>)
// CHECK: %[[Y:.*]] = "novella.layer_norm"(%[[X]], %{{.*}}, %{{.*}}) {eps = 9.99999974E-6 : f32} : ({{.*}}) -> tensor<1x?x64xf32, #[[M]]>
// CHECK: return %[[Y]]
// LEGAL-LABEL: func.func @layer_norm
// LEGAL-SAME: (%[[LX:.*]]: tensor<1x?x64xf32
// LEGAL: %[[LN:.*]] = "novella.layer_norm"(%[[LX]], %{{.*}}, %{{.*}}) {eps = 9.99999974E-6 : f32} : ({{.*}}) -> tensor<1x?x64xf32, #{{.*}}>
// LEGAL: return %[[LN]]
// MACRO-LABEL: func.func @layer_norm
// MACRO: "novella.vop"() {a = "x", {{.*}}dst = "mean", dst_stride = 1 : i64, fn = "ROWSUM"
// MACRO: "novella.vop"() {a = "x", {{.*}}b = "mean", b_stride = 1 : i64, {{.*}}fn = "SUB", mode = "COL"
// MACRO: "novella.vop"() {a = "sq", {{.*}}dst = "var", dst_stride = 1 : i64, fn = "ROWSUM"
// MACRO: "novella.vop"() {{{.*}}fn = "RSQRT"
// MACRO: "novella.vop"() {a = "x", {{.*}}b = "w", {{.*}}fn = "MUL", mode = "ROW"
// MACRO: "novella.vop"() {a = "x", {{.*}}b = "b", {{.*}}dst = "sq", {{.*}}fn = "ADD", mode = "ROW"
// MACRO: "novella.dma_store"() {buffer = "sq"
// x and sq have two slots each (the next row tile loads under this one's VECs); tm = 64: the row tile whose
// predicted cycles stay closest to the best at the planned length and a quarter of it.
// MACRO: buffers = {{{.*}}sq = ["spad", {{[0-9]+}}, 4096, 2]{{.*}}x = ["spad", 0, 4096, 2]}{{.*}}kernel = "novella.layer_norm"{{.*}}tiles = {tm = 64 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @layer_norm(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<64xf32>
    %0 = "novella.layer_norm"(%x, %w, %b) {eps = 1.0e-05 : f32} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32>
    return %0 : tensor<1x?x64xf32>
  }
}

// -----

// Static shapes keep their types.
// CHECK-LABEL: func.func @layer_norm_static
// CHECK: "novella.layer_norm"({{.*}}) -> tensor<4x32xf32>
// LEGAL-LABEL: func.func @layer_norm_static
// LEGAL: "novella.layer_norm"({{.*}}) {eps = 9.99999974E-6 : f32} : ({{.*}}) -> tensor<4x32xf32>
// MACRO-DAG: #[[ROWS4:.*]] = affine_map<(d0) -> (128, d0 * -128 + 4)>
// MACRO-DAG: #[[ONE:.*]] = affine_map<() -> (1)>
// MACRO-LABEL: func.func @layer_norm_static
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = 32 : i64, {{.*}}rows = #[[ROWS4]]
// MACRO: grid = #[[ONE]], kernel = "novella.layer_norm"{{.*}}tiles = {tm = 128 : i64}
func.func @layer_norm_static(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
  %0 = "novella.layer_norm"(%x, %w, %b) {eps = 1.0e-05 : f32} : (tensor<4x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}
