// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// A causal mask from positions: key positions [1, T] <= query positions [T, 1] gives a
// [T, T] 0/1 mask (a row broadcast by the DMA, a column read in COL mode), then
// where(mask, 0, -inf) with 0-d scalars. Both `?` dims are tiled, the last one by 512.
// CHECK-DAG: #[[TT:.*]] = affine_map<()[s0] -> (s0, s0)>
// CHECK-LABEL: func.func @causal_mask
// CHECK-SAME: (%[[K:.*]]: tensor<1x?xf32, #{{.*}}>, %[[Q:.*]]: tensor<?x1xf32, #{{.*}}>, %[[Z:.*]]: tensor<f32>, %[[N:.*]]: tensor<f32>)
// CHECK: %[[M:.*]] = "novella.compare"(%[[K]], %[[Q]]) {fn = "le"} : ({{.*}}) -> tensor<?x?xf32, #[[TT]]>
// CHECK: %[[W:.*]] = "novella.where"(%[[M]], %[[Z]], %[[N]]) : ({{.*}}) -> tensor<?x?xf32, #[[TT]]>
// CHECK: return %[[W]]
// MACRO-DAG: #[[COLS:.*]] = affine_map<(d0, d1)[s0] -> (512, d1 * -512 + s0)>
// MACRO-DAG: #[[ROWS:.*]] = affine_map<(d0, d1)[s0] -> (16, d0 * -16 + s0)>
// MACRO-LABEL: func.func @causal_mask
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p0", cols = #[[COLS]], {{.*}}row_bound = 1 : i64, row_start = 0 : i64, row_step = 0 : i64, rows = #[[ROWS]]
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p1", cols = 1 : i64
// MACRO: "novella.vop"() {a = "p0", {{.*}}b = "p1", b_stride = 1 : i64, cols = #[[COLS]], dst = "p4", {{.*}}fn = "LE", mode = "COL"
// MACRO: kernel = "novella.compare"{{.*}}tiles = {tc = 512 : i64, tm = 16 : i64}
// MACRO: "novella.vop"() {a = "p4", {{.*}}dst = "p5", {{.*}}fn = "COPY"
// MACRO: "novella.vop"() {a = "p0", {{.*}}b = "p1", b_stride = 1 : i64, {{.*}}dst = "p5", {{.*}}fn = "SEL", mode = "COL"
// MACRO: kernel = "novella.where"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @causal_mask(%k: tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>, %q: tensor<?x1xf32, affine_map<()[s0] -> (s0, 1)>>, %z: tensor<f32>, %n: tensor<f32>) -> tensor<?x?xf32> {
    %0 = "novella.compare"(%k, %q) {fn = "le"} : (tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>, tensor<?x1xf32, affine_map<()[s0] -> (s0, 1)>>) -> tensor<?x?xf32>
    %1 = "novella.where"(%0, %z, %n) : (tensor<?x?xf32>, tensor<f32>, tensor<f32>) -> tensor<?x?xf32>
    return %1 : tensor<?x?xf32>
  }
}

// -----

// silu (x * sigmoid(x)) from EXP and DIV, then a mask added over the heads: the
// [1, 1, T, T] operand has batch stride 0 on the head loop (grid dim 0).
// CHECK-LABEL: func.func @silu_and_heads
// CHECK: %[[S:.*]] = "novella.math"(%{{.*}}) {fn = "silu"}
// CHECK: %[[A:.*]] = "novella.add"(%{{.*}}, %{{.*}}) : ({{.*}}) -> tensor<1x4x?x?xf32, #{{.*}}>
// MACRO-LABEL: func.func @silu_and_heads
// MACRO: "novella.vop"() {{{.*}}fn = "EXP"
// MACRO: "novella.vop"() {{{.*}}fn = "DIV"
// MACRO: kernel = "novella.math"
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p1", {{.*}}dram_offset = #{{.*}}, dram_stride = #{{.*}}
// MACRO: kernel = "novella.add"{{.*}}tiles = {tc = 512 : i64, tm = 16 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @silu_and_heads(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %s: tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>, %m: tensor<1x1x?x?xf32, affine_map<()[s0] -> (1, 1, s0, s0)>>) -> (tensor<?x64xf32>, tensor<1x4x?x?xf32>) {
    %0 = "novella.math"(%x) {fn = "silu"} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32>
    %1 = "novella.add"(%s, %m) : (tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>, tensor<1x1x?x?xf32, affine_map<()[s0] -> (1, 1, s0, s0)>>) -> tensor<1x4x?x?xf32>
    return %0, %1 : tensor<?x64xf32>, tensor<1x4x?x?xf32>
  }
}

// -----

// GQA: two key/value heads repeated twice each by a broadcast copy (`expand`), and
// maximum/minimum (clamp) on a `?` row count.
// CHECK-LABEL: func.func @repeat_kv
// CHECK: "novella.broadcast"(%{{.*}}) : (tensor<1x2x1x?x16xf32, #{{.*}}>) -> tensor<1x2x2x?x16xf32, #{{.*}}>
// CHECK: "novella.maximum"
// CHECK: "novella.minimum"
// MACRO-LABEL: func.func @repeat_kv
// MACRO: "novella.vop"() {a = "p0", {{.*}}fn = "COPY"
// MACRO: kernel = "novella.broadcast"
// MACRO: fn = "MAX"
// MACRO: fn = "MIN"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @repeat_kv(%k: tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0, 16)>>, %x: tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>>, %lo: tensor<8xf32>, %hi: tensor<8xf32>) -> (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0, 16)>>, tensor<?x8xf32>) {
    %0 = "novella.broadcast"(%k) : (tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0, 16)>>
    %1 = "novella.maximum"(%x, %lo) : (tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>>, tensor<8xf32>) -> tensor<?x8xf32>
    %2 = "novella.minimum"(%1, %hi) : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
    return %0, %2 : tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0, 16)>>, tensor<?x8xf32>
  }
}

// -----

// expm1 and log1p are one vector function each (EXPM1, LOG1P: no cancellation near 0).
// CHECK-LABEL: func.func @expm1_log1p
// CHECK: %[[E:.*]] = "novella.math"(%{{.*}}) {fn = "expm1"} : ({{.*}}) -> tensor<?x64xf32, #{{.*}}>
// CHECK: "novella.math"(%[[E]]) {fn = "log1p"}
// MACRO-LABEL: func.func @expm1_log1p
// MACRO: "novella.vop"() {{{.*}}fn = "EXPM1"
// MACRO: kernel = "novella.math"
// MACRO: "novella.vop"() {{{.*}}fn = "LOG1P"
// MACRO: kernel = "novella.math"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @expm1_log1p(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32> {
    %0 = "novella.math"(%x) {fn = "expm1"} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32>
    %1 = "novella.math"(%0) {fn = "log1p"} : (tensor<?x64xf32>) -> tensor<?x64xf32>
    return %1 : tensor<?x64xf32>
  }
}

// -----

// exp2 (one entry of dialects/math_fns.py): x * ln 2 into scratch, then EXP, on a `?`-row tile.
// CHECK-LABEL: func.func @exp2
// CHECK: %[[E:.*]] = "novella.math"(%[[X:.*]]) {fn = "exp2"} : ({{.*}}) -> tensor<?x64xf32, #{{.*}}>
// CHECK: return %[[E]]
// MACRO-LABEL: func.func @exp2
// MACRO: "novella.vop"() {a = "[[IN:p[0-9]+]]", {{.*}}dst = "[[TMP:p[0-9]+]]", {{.*}}fn = "MUL", imm = 0.693147{{[0-9]*}} : f32, mode = "SCALAR"
// MACRO: "novella.vop"() {a = "[[TMP]]", {{.*}}fn = "EXP"
// MACRO: kernel = "novella.math"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @exp2(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32> {
    %0 = "novella.math"(%x) {fn = "exp2"} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32>
    return %0 : tensor<?x64xf32>
  }
}

// -----

// log2 (one entry of dialects/math_fns.py): LOG, then the product by 1 / ln 2 in place, on a `?`-row tile.
// CHECK-LABEL: func.func @log2
// CHECK: %[[L:.*]] = "novella.math"(%[[X:.*]]) {fn = "log2"} : ({{.*}}) -> tensor<?x64xf32, #{{.*}}>
// CHECK: return %[[L]]
// MACRO-LABEL: func.func @log2
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "[[IN:p[0-9]+]]"
// MACRO: "novella.vop"() {a = "[[IN]]", {{.*}}dst = "[[OUT:p[0-9]+]]", {{.*}}fn = "LOG"
// MACRO: "novella.vop"() {a = "[[OUT]]", {{.*}}dst = "[[OUT]]", {{.*}}fn = "MUL", imm = 1.442695{{[0-9]*}} : f32, mode = "SCALAR"
// MACRO: "novella.dma_store"() {buffer = "[[OUT]]"
// MACRO: kernel = "novella.math"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @log2(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32> {
    %0 = "novella.math"(%x) {fn = "log2"} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32>
    return %0 : tensor<?x64xf32>
  }
}

// -----

// A binary op over rows wider than a LOAD (4096 > 4095) takes the column-tiled pointwise kernel, not the
// row kernel: 8 column tiles of 512, the broadcast weight row read at the same column offset.
// CHECK-LABEL: func.func @mul_wide_row
// MACRO-DAG: #[[COL:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 512)>
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (s0 ceildiv 16, 8)>
// MACRO-LABEL: func.func @mul_wide_row
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p0", cols = 512 : i64, dram_offset = #[[COL]], dram_stride = 4096 : i64
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p1", cols = 512 : i64, dram_offset = #[[COL]], dram_stride = 4096 : i64, {{.*}}row_step = 0 : i64
// MACRO: fn = "MUL"
// MACRO: grid = #[[GRID]], kernel = "novella.mul"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @mul_wide_row(%x: tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>, %w: tensor<4096xf32>) -> tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>> {
    %0 = "novella.mul"(%x, %w) : (tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>, tensor<4096xf32>) -> tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>
    return %0 : tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>
  }
}
