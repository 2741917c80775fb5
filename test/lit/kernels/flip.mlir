// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// flip of the dynamic dim (rows form): output rows [64 d1, 64 d1 + 64) are input rows
// [s0 - 64 (d1 + 1), s0 - 64 d1), loaded as one tile (rows before 0 zero-filled: the partial
// last tile), reversed by one COPY per row, stored with the row bound s0.
// CHECK-DAG: #[[X:.*]] = affine_map<()[s0] -> (2, s0, 8)>
// CHECK-LABEL: func.func @flip_length
// CHECK: %[[F:.*]] = "novella.flip"(%{{.*}}) {dim = 1 : i64} : (tensor<2x?x8xf32, #[[X]]>) -> tensor<2x?x8xf32, #[[X]]>
// CHECK: return %[[F]]
// MACRO-DAG: #[[BASE:.*]] = affine_map<(d0, d1)[s0] -> (d0 * (s0 * 8))>
// MACRO-DAG: #[[BOUND:.*]] = affine_map<(d0, d1)[s0] -> (s0)>
// MACRO-DAG: #[[FROM:.*]] = affine_map<(d0, d1)[s0] -> ((d1 + 1) * -64 + s0)>
// MACRO-DAG: #[[TO:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 64)>
// MACRO-DAG: #[[ROWS:.*]] = affine_map<(d0, d1)[s0] -> (64, d1 * -64 + s0)>
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 64)>
// MACRO-LABEL: func.func @flip_length
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t", cols = 8 : i64, dram_offset = #[[BASE]], dram_stride = 8 : i64, row_bound = #[[BOUND]], row_start = #[[FROM]], row_step = 1 : i64, rows = 64 : i64
// MACRO-NEXT: "novella.vop"() {a = "t", a_offset = 504 : i64, {{.*}}dst = "o", dst_offset = 0 : i64, {{.*}}fn = "COPY", rows = 1 : i64}
// MACRO: "novella.vop"() {a = "t", a_offset = 0 : i64, {{.*}}dst = "o", dst_offset = 504 : i64, {{.*}}fn = "COPY", rows = 1 : i64}
// MACRO-NEXT: "novella.dma_store"() {buffer = "o", cols = 8 : i64, dram_offset = #[[BASE]], dram_stride = 8 : i64, row_bound = #[[BOUND]], row_start = #[[TO]], row_step = 1 : i64, rows = #[[ROWS]]
// MACRO: grid = #[[GRID]], kernel = "novella.flip"{{.*}}tiles = {tm = 64 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @flip_length(%x: tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x?x8xf32> {
    %0 = "novella.flip"(%x) {dim = 1 : i64} : (tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x?x8xf32>
    return %0 : tensor<2x?x8xf32>
  }
}

// -----

// flip of a static dim (columns form): each [tm, 12] row tile is loaded whole; its three
// [tm, 4] column blocks are copied in reverse order.
// CHECK-LABEL: func.func @flip_static
// CHECK: "novella.flip"(%{{.*}}) {dim = 1 : i64} : (tensor<?x3x4xf32, #{{.*}}>) -> tensor<?x3x4xf32, #{{.*}}>
// MACRO-LABEL: func.func @flip_static
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t", cols = 12 : i64, dram_offset = 0 : i64, dram_stride = 12 : i64
// MACRO-NEXT: "novella.vop"() {a = "t", a_offset = 0 : i64, a_stride = 12 : i64, cols = 4 : i64, dst = "o", dst_offset = 8 : i64, dst_stride = 12 : i64, fn = "COPY"
// MACRO-NEXT: "novella.vop"() {a = "t", a_offset = 4 : i64, a_stride = 12 : i64, cols = 4 : i64, dst = "o", dst_offset = 4 : i64, dst_stride = 12 : i64, fn = "COPY"
// MACRO-NEXT: "novella.vop"() {a = "t", a_offset = 8 : i64, a_stride = 12 : i64, cols = 4 : i64, dst = "o", dst_offset = 0 : i64, dst_stride = 12 : i64, fn = "COPY"
// MACRO-NEXT: "novella.dma_store"() {buffer = "o", cols = 12 : i64
// MACRO: kernel = "novella.flip"{{.*}}tiles = {tm = 512 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @flip_static(%x: tensor<?x3x4xf32, affine_map<()[s0] -> (s0, 3, 4)>>) -> tensor<?x3x4xf32> {
    %0 = "novella.flip"(%x) {dim = 1 : i64} : (tensor<?x3x4xf32, affine_map<()[s0] -> (s0, 3, 4)>>) -> tensor<?x3x4xf32>
    return %0 : tensor<?x3x4xf32>
  }
}

