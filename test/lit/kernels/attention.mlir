// RUN: novella-opt %s --novella-tile --novella-macro-gen --split-input-file --verify-diagnostics | FileCheck %s
// RUN: novella-opt %s -p 'builtin.module(novella-legalize{fuse-attention=0})' --split-input-file | FileCheck %s --check-prefix=LEGAL
// RUN: novella-opt %s -p 'builtin.module(novella-legalize{fuse-attention=0},novella-allocate,novella-tile,novella-macro-gen)' --split-input-file | FileCheck %s --check-prefix=MACRO
//
// Tile sizes are the kernels' cost-model choices, planned with every symbol at the nominal
// length (kernels/attention.py NOMINAL_LENGTH), never at the bounds, so they do not move with
// max_len; each case says what its choice follows from.

// Q @ K^T: M and N are both the dynamic length, K^T is read in place (transpose_b);
// the edge tiles are min(256, T - 256 * d1) and min(16, T - 16 * d2). K = 64 is one k step,
// so the 256-row query tile stays resident (loaded on the first key tile) while 16-key tiles
// stream past it and the accumulator stores from two slots: the cost model's cheapest.
// CHECK-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 256, s0 ceildiv 16, 1)>
// CHECK-DAG: #[[M:.*]] = affine_map<(d0, d1, d2, d3)[s0] -> (256, d1 * -256 + s0)>
// CHECK-DAG: #[[N:.*]] = affine_map<(d0, d1, d2, d3)[s0] -> (16, d2 * -16 + s0)>
// CHECK-DAG: #[[OUT:.*]] = affine_map<(d0, d1, d2, d3)[s0] -> (d0 * (s0 * s0) + d2 * 16)>
// CHECK-LABEL: func.func @scores
// CHECK-SAME: (%[[Q:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[K:.*]]: tensor<2x?x64xf32
// CHECK: %[[S:.*]] = "novella.macro"() ({
// CHECK: "novella.dma_load"(%[[Q]]) {buffer = "a", {{.*}}rows = #[[M]]
// CHECK: "novella.dma_load"(%[[K]]) {buffer = "b", {{.*}}rows = #[[N]]
// CHECK: "novella.mma"() {{{.*}}lhs = "a", m = #[[M]], n = #[[N]], rhs = "b", transpose_b = 1 : i64}
// CHECK: "novella.dma_store"() {buffer = "acc", cols = #[[N]], dram_offset = #[[OUT]]
// CHECK: }) {{{.*}}grid = #[[GRID]], kernel = "novella.matmul"{{.*}}tiles = {tk = 64 : i64, tm = 256 : i64, tn = 16 : i64}}
// CHECK: return %[[S]]
// LEGAL-LABEL: func.func @scores
// LEGAL: "novella.matmul"{{.*}}transpose_rhs = true
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @scores(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>> {
    %0 = "novella.matmul"(%q, %k) {transpose_rhs = true, novella.dram = affine_map<()[s0] -> (s0 * 256)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    return %0 : tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
  }
}

// -----

// P @ V: the contraction dim is dynamic: a symbolic number of k-tiles, the last one
// partial (k = min(64, T - 64 * d3)); accumulate from the second k-tile on, store on the last.
// The lhs and rhs tiles stream through two slots each; the cost model takes 256-row, 64-deep tiles.
// CHECK-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 256, 1, s0 ceildiv 64)>
// CHECK-DAG: #[[KK:.*]] = affine_map<(d0, d1, d2, d3)[s0] -> (64, d3 * -64 + s0)>
// CHECK-DAG: #[[ACCUM:.*]] = affine_map<(d0, d1, d2, d3)[s0] -> (d3, 1)>
// CHECK-DAG: #[[LASTK:.*]] = affine_set<(d0, d1, d2, d3)[s0] : (-d3 + s0 ceildiv 64 - 1 == 0)>
// CHECK-LABEL: func.func @context
// CHECK-SAME: (%[[P:.*]]: tensor<2x?x?xf32, {{.*}}>, %[[V:.*]]: tensor<2x?x64xf32
// CHECK: "novella.dma_load"(%[[P]]) {buffer = "a", cols = #[[KK]]
// CHECK: "novella.dma_load"(%[[V]]) {buffer = "b", cols = 64 : i64, {{.*}}rows = #[[KK]]
// CHECK: "novella.mma"() {{{.*}}accumulate = #[[ACCUM]], {{.*}}k = #[[KK]], {{.*}}n = 64 : i64, {{.*}}transpose_b = 0 : i64}
// CHECK: "novella.dma_store"() {buffer = "acc", {{.*}}when = #[[LASTK]]}
// CHECK: grid = #[[GRID]], kernel = "novella.matmul"
// LEGAL-LABEL: func.func @context
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @context(%p: tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, %v: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>> {
    %0 = "novella.matmul"(%p, %v) {transpose_rhs = false, novella.dram = affine_map<()[s0] -> (0)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
    return %0 : tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
  }
}

// -----

// Softmax over a static last dim with a dynamic row count: one step per row tile,
// the fused scale (novella.scale) multiplies x - max before the exp. (A dynamic last
// dim is always chunked, so that tiling does not depend on max_len.)
// tm = 128: the largest row tile whose in and out buffers, two slots each (4 x 128 x 96 fp32),
// fit the 64K-element SPAD (256 rows would need 98304); the rows are the 2 * T rows of the batch.
// CHECK-DAG: #[[GRID:.*]] = affine_map<()[s0] -> ((s0 * 2) ceildiv 128)>
// CHECK-LABEL: func.func @probs
// CHECK-SAME: (%[[X:.*]]: tensor<2x?x96xf32
// CHECK: "novella.dma_load"(%[[X]]) {buffer = "in", cols = 96 : i64, {{.*}}sram_stride = 96 : i64
// CHECK-NEXT: "novella.vop"() {a = "in", {{.*}}dst = "m", dst_stride = 1 : i64, fn = "ROWMAX"
// CHECK-NEXT: "novella.vop"() {a = "in", {{.*}}b = "m", {{.*}}dst = "out", {{.*}}fn = "SUB", mode = "COL"
// CHECK-NEXT: "novella.vop"() {{{.*}}fn = "MUL", imm = 1.250000e-01 : f32, mode = "SCALAR"
// CHECK-NEXT: "novella.vop"() {{{.*}}fn = "EXP"
// CHECK-NEXT: "novella.vop"() {a = "out", {{.*}}dst = "l", dst_stride = 1 : i64, fn = "ROWSUM"
// CHECK-NEXT: "novella.vop"() {a = "out", {{.*}}b = "l", {{.*}}fn = "DIV", mode = "COL"
// CHECK-NEXT: "novella.dma_store"() {buffer = "out"
// CHECK: grid = #[[GRID]], kernel = "novella.softmax"{{.*}}tiles = {chunked = 0 : i64, tc = 96 : i64, tm = 128 : i64}
// LEGAL-LABEL: func.func @probs
module attributes {novella.symbols = {s0 = ["T", 1, 1500]}} {
  func.func @probs(%s: tensor<2x?x96xf32, affine_map<()[s0] -> (2, s0, 96)>>) -> tensor<2x?x96xf32, affine_map<()[s0] -> (2, s0, 96)>> {
    %0 = "novella.softmax"(%s) {novella.scale = 1.250000e-01 : f32, novella.dram = affine_map<()[s0] -> (0)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<2x?x96xf32, affine_map<()[s0] -> (2, s0, 96)>>) -> tensor<2x?x96xf32, affine_map<()[s0] -> (2, s0, 96)>>
    return %0 : tensor<2x?x96xf32, affine_map<()[s0] -> (2, s0, 96)>>
  }
}

// -----

// Rows longer than a field (4095) are chunked: grid (row tile, pass, chunk); pass 0 keeps
// the running max and rescaled running sum, pass 1 normalizes and stores.
// CHECK-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (4, 2, s0 ceildiv 2048)>
// CHECK-DAG: #[[FIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 == 0)>
// CHECK-DAG: #[[REST:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 - 1 >= 0)>
// CHECK-DAG: #[[NORM:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 - 1 == 0)>
// CHECK-LABEL: func.func @long_rows
// CHECK: "novella.vop"() {{{.*}}dst = "m", {{.*}}fn = "ROWMAX", rows = 1 : i64, when = #[[FIRST]]}
// CHECK: "novella.vop"() {{{.*}}dst = "cm", {{.*}}fn = "ROWMAX", rows = 1 : i64, when = #[[REST]]}
// CHECK: "novella.vop"() {a = "l", {{.*}}b = "t", {{.*}}fn = "MUL", rows = 1 : i64, when = #[[REST]]}
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "l", {{.*}}fn = "DIV", mode = "COL", rows = 1 : i64, when = #[[NORM]]}
// CHECK: "novella.dma_store"() {buffer = "out", {{.*}}when = #[[NORM]]}
// CHECK: grid = #[[GRID]], kernel = "novella.softmax"{{.*}}tiles = {chunked = 1 : i64, tc = 2048 : i64, tm = 1 : i64}
// LEGAL-LABEL: func.func @long_rows
// MACRO-LABEL: func.func @long_rows
// MACRO: kernel = "novella.softmax"{{.*}}tiles = {chunked = 1 : i64, tc = 2048 : i64, tm = 1 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 6000]}} {
  func.func @long_rows(%x: tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>) -> tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>> {
    %0 = "novella.softmax"(%x) {novella.dram = affine_map<()[s0] -> (0)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>) -> tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>
    return %0 : tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>
  }
}

// -----

// A safe softmax (`_safe_softmax`, SDPA's): a row of all -inf gives 0, not NaN. The first chunk's
// row max is floored at -FLT_MAX (exp(-inf + FLT_MAX) = 0, where exp(-inf + inf) is NaN), and pass 1
// floors the row sum at f32's least normal before its first divide (0 / 1.17e-38 = 0; a row with
// a finite input has a sum >= 1).
// CHECK-DAG: #[[FIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 == 0)>
// CHECK-DAG: #[[NORM0:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 - 1 == 0, d2 == 0)>
// CHECK-DAG: #[[NORM:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 - 1 == 0)>
// CHECK-LABEL: func.func @long_rows_safe
// CHECK: "novella.vop"() {{{.*}}dst = "m", {{.*}}fn = "ROWMAX", rows = 1 : i64, when = #[[FIRST]]}
// CHECK-NEXT: "novella.vop"() {a = "m", {{.*}}dst = "m", {{.*}}fn = "MAX", imm = -3.40282347E+38 : f32, mode = "SCALAR", rows = 1 : i64, when = #[[FIRST]]}
// CHECK: "novella.vop"() {a = "l", {{.*}}dst = "l", {{.*}}fn = "MAX", imm = 1.17549435E-38 : f32, mode = "SCALAR", rows = 1 : i64, when = #[[NORM0]]}
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "l", {{.*}}fn = "DIV", mode = "COL", rows = 1 : i64, when = #[[NORM]]}
// LEGAL-LABEL: func.func @long_rows_safe
// LEGAL: "novella.softmax"({{.*}}) {{{.*}}safe = true}
module attributes {novella.symbols = {s0 = ["T", 1, 6000]}} {
  func.func @long_rows_safe(%x: tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>) -> tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>> {
    %0 = "novella.softmax"(%x) {safe = true, novella.dram = affine_map<()[s0] -> (0)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>) -> tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>
    return %0 : tensor<4x?xf32, affine_map<()[s0] -> (4, s0)>>
  }
}

// -----

// Legalize with fuse-attention=0 (flash-attention.mlir has the fused kernel): attention
// decomposes into matmul(transpose_rhs) + softmax (scale fused) + matmul.
// Without legalize and allocate, --novella-tile refuses it (expected-error below).
// Then three macros, as the cost model picks them: Q @ K^T with a resident 256-row query tile
// and 16-key tiles (one k step, see @scores); the softmax over the dynamic key length is
// chunked (tc = 2048 columns, 4 of the 2 * T rows per tile); P @ V runs 256-row tiles over
// k-tiles of 64 keys (tn = 64 = the head dim).
// LEGAL-DAG: #[[SCORES:.*]] = affine_map<()[s0] -> (2, s0, s0)>
// MACRO-DAG: #[[QK:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 256, s0 ceildiv 16, 1)>
// MACRO-DAG: #[[SMAX:.*]] = affine_map<()[s0] -> ((s0 * 2) ceildiv 4, 2, s0 ceildiv 2048)>
// MACRO-DAG: #[[PV:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 256, 1, s0 ceildiv 64)>
// MACRO-LABEL: func.func @attention
// MACRO: }) {{{.*}}grid = #[[QK]], kernel = "novella.matmul", {{.*}}tiles = {tk = 64 : i64, tm = 256 : i64, tn = 16 : i64}}
// MACRO: }) {{{.*}}grid = #[[SMAX]], kernel = "novella.softmax", {{.*}}tiles = {chunked = 1 : i64, tc = 2048 : i64, tm = 4 : i64}}
// MACRO: }) {{{.*}}grid = #[[PV]], kernel = "novella.matmul", {{.*}}tiles = {tk = 64 : i64, tm = 256 : i64, tn = 64 : i64}}
// MACRO-NOT: kernel =
// MACRO: return
// LEGAL-LABEL: func.func @attention
// LEGAL-SAME: (%[[Q:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[K:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[V:.*]]: tensor<2x?x64xf32
// LEGAL: %[[S:.*]] = "novella.matmul"(%[[Q]], %[[K]]) {transpose_rhs = true} : {{.*}} -> tensor<2x?x?xf32, #[[SCORES]]>
// LEGAL: %[[P:.*]] = "novella.softmax"(%[[S]]) {novella.scale = 1.250000e-01 : f32, safe = false}
// LEGAL: %[[O:.*]] = "novella.matmul"(%[[P]], %[[V]]) {transpose_rhs = false}
// LEGAL-NOT: novella.attention
// LEGAL: return %[[O]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @attention(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %v: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>> {
    // expected-error @+1 {{'novella.attention' op has no 'novella.sram_budget' attribute: --novella-tile expects the output of --novella-allocate}}
    %0 = "novella.attention"(%q, %k, %v) {scale = 0.125 : f32} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
    return %0 : tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
  }
}

// -----

// Legalize: a transpose of the last two dims (behind a reshape of the batch dims, as the
// eager attention exports it) folds into the matmul's transpose_rhs.
// The whole pipeline then runs one matmul macro that reads K^T in place: no transpose macro.
// LEGAL-DAG: #[[KEYS:.*]] = affine_map<()[s0] -> (2, s0, 64)>
// MACRO-DAG: #[[G:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 256, s0 ceildiv 16, 1)>
// MACRO-LABEL: func.func @fold_transpose
// MACRO-NOT: kernel = "novella.transpose"
// MACRO: }) {{{.*}}grid = #[[G]], kernel = "novella.matmul", {{.*}}tiles = {tk = 64 : i64, tm = 256 : i64, tn = 16 : i64}}
// MACRO-NOT: kernel =
// MACRO: return
// LEGAL-LABEL: func.func @fold_transpose
// LEGAL-SAME: (%[[Q:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[K:.*]]: tensor<1x2x?x64xf32
// LEGAL-NOT: novella.transpose
// LEGAL: %[[R:.*]] = "novella.reshape"(%[[K]]) : {{.*}} -> tensor<2x?x64xf32, #[[KEYS]]>
// LEGAL: %[[S:.*]] = "novella.matmul"(%[[Q]], %[[R]]) {transpose_rhs = true}
// LEGAL-NOT: novella.transpose
// LEGAL: return %[[S]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @fold_transpose(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>> {
    // expected-error @+1 {{'novella.transpose' op has no 'novella.sram_budget' attribute}}
    %t = "novella.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>) -> tensor<1x2x64x?xf32, affine_map<()[s0] -> (1, 2, 64, s0)>>
    %r = "novella.reshape"(%t) : (tensor<1x2x64x?xf32, affine_map<()[s0] -> (1, 2, 64, s0)>>) -> tensor<2x64x?xf32, affine_map<()[s0] -> (2, 64, s0)>>
    %0 = "novella.matmul"(%q, %r) {transpose_rhs = false} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x64x?xf32, affine_map<()[s0] -> (2, 64, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    return %0 : tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
  }
}
