// RUN: novella-opt %s --novella-legalize --split-input-file | FileCheck %s --check-prefix=LEGAL
// RUN: novella-opt %s -p 'builtin.module(novella-legalize{fuse-residual=0 fuse-norm=0})' --split-input-file | FileCheck %s --check-prefix=UNFUSED
// RUN: novella-opt %s --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s

// A residual add of a `?`-row linear folds into its epilogue: the residual tile is loaded on each
// output block's last k step (two slots: it is read only under that guard), added to the activated
// tile, and the sum stored once. With the bias row resident (one LOAD on the op's first step) the cost
// model gives the accumulator two halves: block d1 - 1's epilogue runs before block d1's MATMUL.
// LEGAL-LABEL: func.func @residual
// LEGAL-SAME: (%[[X:.*]]: tensor<1x?x64xf32, {{.*}}>, %[[H:.*]]: tensor<1x?x96xf32
// LEGAL: %[[W:.*]] = "novella.weight"() {name = "w"}
// LEGAL: %[[B:.*]] = "novella.weight"() {name = "b"}
// LEGAL: %[[Y:.*]] = "novella.fused_linear"(%[[H]], %[[W]], %[[B]], %[[X]]) {act = "relu", norm_eps = {{.*}}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>}
// LEGAL-NOT: novella.add
// LEGAL: return %[[Y]]
// UNFUSED-LABEL: func.func @residual
// UNFUSED: %[[L:.*]] = "novella.linear"({{.*}}) {act = "relu"}
// UNFUSED: %[[S:.*]] = "novella.add"(%{{.*}}, %[[L]])
// UNFUSED: return %[[S]]
// CHECK-LABEL: func.func @residual
// CHECK: "novella.macro"()
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "bias", chain = 1 : i64, cols = 64 : i64, dram_offset = 0 : i64, {{.*}}tensor = 2 : i64, when =
// CHECK: "novella.dma_load"(%arg0) {{{.*}}buffer = "res"{{.*}}tensor = 3 : i64, when = #[[$LAST:.*]]}
// CHECK: "novella.vop"() {a = "acc", {{.*}}b = "bias", {{.*}}fn = "ADD", mode = "ROW"{{.*}}when = #[[$LAST]]}
// CHECK: "novella.vop"() {{{.*}}fn = "RELU"
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "res", {{.*}}dst = "out", {{.*}}fn = "ADD"{{.*}}when = #[[$LAST]]}
// CHECK: "novella.dma_store"() {buffer = "out"{{.*}}when = #[[$LAST]]}
// CHECK: "novella.mma"() {{{.*}}acc = "acc", acc_offset
// CHECK: buffers = {{{.*}}res = ["spad", {{[0-9]+}}, {{[0-9]+}}, 2]{{.*}}kernel = "novella.fused_linear"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @residual(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, %h: tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<64x96xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<64xf32>
    %0 = "novella.linear"(%h, %w, %b) {act = "relu"} : (tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>, tensor<64x96xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %1 = "novella.add"(%x, %0) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %1 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// A GELU epilogue is long enough that the cost model gives the accumulator two halves, picked by the
// parity of the output block along grid dim 1 (here the `?` row blocks, weight-stationary: an address
// expression of d1, not the step parity of --novella-schedule, as the k loop accumulates across steps).
// Block d1 - 1's epilogue then runs on block d1's first k step, before its MATMUL, from the other half
// and with that block's rows and its columns of the bias row (resident: one LOAD on the op's first step);
// the last row block's runs after its own MATMUL, into `out2`.
// CHECK-DAG: #[[$PREVHALF:.*]] = affine_map<(d0, d1, d2)[s0] -> (((d1 + 1) mod 2) * 1536)>
// CHECK-DAG: #[[$PREVROW:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d1 - 1) * 16)>
// CHECK-DAG: #[[$HALF:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d1 mod 2) * 1536)>
// CHECK-DAG: #[[$DEFER:.*]] = affine_set<(d0, d1, d2)[s0] : (d2 == 0, d1 - 1 >= 0)>
// CHECK-DAG: #[[$FINAL:.*]] = affine_set<(d0, d1, d2)[s0] : (-d1 + s0 ceildiv 16 - 1 == 0, -d2 == 0)>
// CHECK-DAG: #[[$OPFIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d0 == 0, d1 == 0, d2 == 0)>
// CHECK-LABEL: func.func @deferred
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "bias", chain = 1 : i64, cols = 1536 : i64, {{.*}}when = #[[$OPFIRST]]}
// CHECK: "novella.vop"() {a = "acc", a_offset = #[[$PREVHALF]], {{.*}}fn = "ADD", mode = "ROW", {{.*}}when = #[[$DEFER]]}
// CHECK: "novella.vop"() {{{.*}}fn = "ERF", {{.*}}when = #[[$DEFER]]}
// CHECK: "novella.dma_store"() {buffer = "out", {{.*}}row_start = #[[$PREVROW]], {{.*}}when = #[[$DEFER]]}
// CHECK: "novella.mma"() {{{.*}}acc = "acc", acc_offset = #[[$HALF]]
// CHECK: "novella.vop"() {a = "acc", a_offset = #[[$HALF]], {{.*}}dst = "out2", {{.*}}when = #[[$FINAL]]}
// CHECK: "novella.dma_store"() {buffer = "out2", {{.*}}when = #[[$FINAL]]}
// CHECK: tiles = {acc_slots = 2 : i64, tk = 384 : i64, tm = 16 : i64, tn = 96 : i64, ws = 1 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @deferred(%h: tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>) -> tensor<1x?x1536xf32, affine_map<()[s0] -> (1, s0, 1536)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<1536x384xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<1536xf32>
    %0 = "novella.linear"(%h, %w, %b) {act = "gelu"} : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<1536x384xf32>, tensor<1536xf32>) -> tensor<1x?x1536xf32, affine_map<()[s0] -> (1, s0, 1536)>>
    return %0 : tensor<1x?x1536xf32, affine_map<()[s0] -> (1, s0, 1536)>>
  }
}

// -----

// A broadcast residual (a [64] row) is not the sum's shape: the add stays a separate op.
// LEGAL-LABEL: func.func @broadcast_residual
// LEGAL: %[[L:.*]] = "novella.linear"
// LEGAL: "novella.add"(%[[L]], %{{.*}})
// CHECK-LABEL: func.func @broadcast_residual
// CHECK: kernel = "novella.linear"
// CHECK: kernel = "novella.add"
func.func @broadcast_residual(%h: tensor<8x96xf32>) -> tensor<8x64xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<64x96xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<64xf32>
  %r = "novella.weight"() {name = "r"} : () -> tensor<64xf32>
  %0 = "novella.linear"(%h, %w, %b) {act = "none"} : (tensor<8x96xf32>, tensor<64x96xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %1 = "novella.add"(%0, %r) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  return %1 : tensor<8x64xf32>
}

// -----

// Post-norm `layer_norm(x + linear(h))` of a `?`-row tensor: both fold into the linear, whose output
// tile then holds whole rows (tn = N = 64); the norm's weight and bias load once (first step), and
// the row statistics are two ROWSUMs on the summed tile before its one STORE.
// LEGAL-LABEL: func.func @post_norm
// LEGAL-SAME: (%[[X:.*]]: tensor<1x?x64xf32, {{.*}}>, %[[H:.*]]: tensor<1x?x96xf32
// LEGAL: %[[NW:.*]] = "novella.weight"() {name = "nw"}
// LEGAL: %[[NB:.*]] = "novella.weight"() {name = "nb"}
// LEGAL: %[[Y:.*]] = "novella.fused_linear"(%[[H]], %{{.*}}, %{{.*}}, %[[X]], %[[NW]], %[[NB]]) {act = "none", norm_eps = 9.99999974E-6 : f32, norm_input = false, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>}
// LEGAL-NOT: novella.layer_norm
// LEGAL: return %[[Y]]
// UNFUSED-LABEL: func.func @post_norm
// UNFUSED: "novella.linear"
// UNFUSED: "novella.add"
// UNFUSED: "novella.layer_norm"
// CHECK-LABEL: func.func @post_norm
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "nw", {{.*}}tensor = 4 : i64, when = #[[$FIRST:.*]]}
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "nb", {{.*}}tensor = 5 : i64, when = #[[$FIRST]]}
// CHECK: "novella.dma_load"(%arg0) {{{.*}}buffer = "res"
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "res", {{.*}}fn = "ADD"
// CHECK: "novella.vop"() {a = "out", {{.*}}dst = "mean", {{.*}}fn = "ROWSUM"
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "mean", {{.*}}dst = "out", {{.*}}fn = "SUB", mode = "COL"
// CHECK: "novella.vop"() {a = "tmp", {{.*}}dst = "var", {{.*}}fn = "ROWSUM"
// CHECK: "novella.vop"() {a = "var", {{.*}}fn = "RSQRT"
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "nb", {{.*}}dst = "out", {{.*}}fn = "ADD", mode = "ROW"
// CHECK: "novella.dma_store"() {buffer = "out"
// CHECK: kernel = "novella.fused_linear"
// CHECK-SAME: tn = 64 : i64
// CHECK-NOT: kernel = "novella.layer_norm"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @post_norm(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, %h: tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<64x96xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<64xf32>
    %nw = "novella.weight"() {name = "nw"} : () -> tensor<64xf32>
    %nb = "novella.weight"() {name = "nb"} : () -> tensor<64xf32>
    %0 = "novella.linear"(%h, %w, %b) {act = "none"} : (tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>, tensor<64x96xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %1 = "novella.add"(%0, %x) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %2 = "novella.layer_norm"(%1, %nw, %nb) {eps = 9.99999974E-6 : f32} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %2 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// Whole rows of a wide linear (N = 4096) do not fit the accumulator with any row tile: the
// layer norm stays its own kernel.
// LEGAL-LABEL: func.func @norm_too_wide
// LEGAL: %[[L:.*]] = "novella.linear"
// LEGAL: "novella.layer_norm"(%[[L]]
// CHECK-LABEL: func.func @norm_too_wide
// CHECK: kernel = "novella.layer_norm"
func.func @norm_too_wide(%h: tensor<4x64xf32>) -> tensor<4x4096xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<4096x64xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<4096xf32>
  %nw = "novella.weight"() {name = "nw"} : () -> tensor<4096xf32>
  %nb = "novella.weight"() {name = "nb"} : () -> tensor<4096xf32>
  %0 = "novella.linear"(%h, %w, %b) {act = "none"} : (tensor<4x64xf32>, tensor<4096x64xf32>, tensor<4096xf32>) -> tensor<4x4096xf32>
  %1 = "novella.layer_norm"(%0, %nw, %nb) {eps = 9.99999974E-6 : f32} : (tensor<4x4096xf32>, tensor<4096xf32>, tensor<4096xf32>) -> tensor<4x4096xf32>
  return %1 : tensor<4x4096xf32>
}

// -----

// A bias row wider than a LOAD's cols field (4096 > 4095) is loaded as one contiguous 2 x 2048 block.
// CHECK-LABEL: func.func @wide_linear
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "bias", chain = 1 : i64, cols = 2048 : i64, {{.*}}rows = 2 : i64
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @wide_linear(%h: tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>, %w: tensor<4096x16xf32>, %b: tensor<4096xf32>) -> tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>> {
    %0 = "novella.linear"(%h, %w, %b) {act = "none"} : (tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>, tensor<4096x16xf32>, tensor<4096xf32>) -> tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>
    return %0 : tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>
  }
}

// -----

// K = 4096 is wider than a LOAD: only the order that streams K tiles (ws = 0) is a candidate, so no LOAD
// takes a whole row of K.
// CHECK-LABEL: func.func @deep_linear
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "w", chain = 1 : i64, cols = [[TK:[0-9]+]] : i64
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "a", chain = 1 : i64, cols = [[TK]] : i64
// CHECK: tiles = {{{.*}}tk = [[TK]] : i64, {{.*}}ws = 0 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @deep_linear(%h: tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>, %w: tensor<8x4096xf32>, %b: tensor<8xf32>) -> tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>> {
    %0 = "novella.linear"(%h, %w, %b) {act = "none"} : (tensor<1x?x4096xf32, affine_map<()[s0] -> (1, s0, 4096)>>, tensor<8x4096xf32>, tensor<8xf32>) -> tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>
    return %0 : tensor<1x?x8xf32, affine_map<()[s0] -> (1, s0, 8)>>
  }
}

// -----

// An RMSNorm prologue (no norm_bias) with the SwiGLU gate as the residual (act "swiglu"): the rows in
// `a` times the norm's weight into `pa`, the MATMULs' A operand; after the MATMUL, beside it, each row's
// squares summed into `pss` and turned into rsqrt(mean + eps); the epilogue scales each output row by
// `pss`, adds the bias and multiplies by silu of the gate tile loaded into `res` (read only: the quotient
// gate / (1 + exp(-gate)) goes to `tmp`).
// CHECK-LABEL: func.func @rms_swiglu
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "pw", {{.*}}tensor = 4 : i64
// CHECK: "novella.vop"() {a = "a", {{.*}}b = "pw", {{.*}}dst = "pa", {{.*}}fn = "MUL", mode = "ROW"
// CHECK: "novella.mma"() {{{.*}}lhs = "pa"
// CHECK: "novella.vop"() {a = "a", {{.*}}b = "a", {{.*}}dst = "a", {{.*}}fn = "MUL"
// CHECK: "novella.vop"() {a = "a", {{.*}}dst = "pss", {{.*}}fn = "ROWSUM"
// CHECK: "novella.vop"() {{{.*}}fn = "RSQRT"
// CHECK: "novella.vop"() {a = "acc", {{.*}}b = "pss", {{.*}}fn = "MUL", mode = "COL"
// CHECK: "novella.vop"() {{{.*}}b = "bias", {{.*}}fn = "ADD", mode = "ROW"
// CHECK: "novella.vop"() {{{.*}}fn = "EXP"
// CHECK: "novella.vop"() {a = "res", {{.*}}b = "tmp", {{.*}}dst = "tmp", {{.*}}fn = "DIV"
// CHECK: "novella.vop"() {a = "out", {{.*}}b = "tmp", {{.*}}dst = "out", {{.*}}fn = "MUL"
// CHECK: kernel = "novella.fused_linear"
module attributes {novella.symbols = {s0 = ["T", 1, 64]}} {
  func.func @rms_swiglu(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, %g: tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>, %w: tensor<96x64xf32>, %b: tensor<96xf32>, %nw: tensor<64xf32>) -> tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>> {
    %0 = "novella.fused_linear"(%x, %w, %b, %g, %nw) {act = "swiglu", norm_eps = 9.99999997E-7 : f32, norm_input = true, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0>} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<96x64xf32>, tensor<96xf32>, tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>, tensor<64xf32>) -> tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>
    return %0 : tensor<1x?x96xf32, affine_map<()[s0] -> (1, s0, 96)>>
  }
}

// -----

// 32 rows (a batched decode step's q, k or v) with an RMSNorm prologue: the tiles that differ only in a
// tm >= 32 cost the same and the search takes the smallest, tm = 32 (the row slab holds the rows, no
// more). Input-stationary with tk = 64 < K, the squares and row sums run on the first output block's
// two k steps, 64 columns each (the later one summed through `psum`), the rsqrt on the last one (whose
// column ops are one [1, 32] row each).
// CHECK-DAG: #[[K0:.*]] = affine_set<(d0, d1, d2) : (d1 == 0, d2 == 0)>
// CHECK-DAG: #[[K1:.*]] = affine_set<(d0, d1, d2) : (d1 == 0, d2 - 1 == 0)>
// CHECK-LABEL: func.func @rms_rows_32
// CHECK: "novella.vop"() {a = "a", a_offset = 0 : i64, {{.*}}dst = "pss", {{.*}}fn = "ROWSUM", {{.*}}when = #[[K0]]}
// CHECK: "novella.vop"() {a = "a", a_offset = 64 : i64, {{.*}}dst = "psum", {{.*}}fn = "ROWSUM", {{.*}}when = #[[K1]]}
// CHECK: "novella.vop"() {a = "pss", {{.*}}b = "psum", {{.*}}fn = "ADD", rows = 1 : i64, when = #[[K1]]}
// CHECK: "novella.vop"() {{{.*}}fn = "RSQRT", rows = 1 : i64, when = #[[K1]]}
// CHECK: psum = ["spad", {{[0-9]+}}, 32]
// CHECK-SAME: tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 32 : i64, tn = 16 : i64, ws = 2 : i64}
module {
  func.func @rms_rows_32(%x: tensor<32x128xf32>, %w: tensor<64x128xf32>, %b: tensor<64xf32>, %nw: tensor<128xf32>) -> tensor<32x64xf32> {
    %0 = "novella.fused_linear"(%x, %w, %b, %nw) {act = "none", norm_eps = 9.99999997E-7 : f32, norm_input = true, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 0>} : (tensor<32x128xf32>, tensor<64x128xf32>, tensor<64xf32>, tensor<128xf32>) -> tensor<32x64xf32>
    return %0 : tensor<32x64xf32>
  }
}

// -----

// The same linear over `?` rows, planned at the nominal length: weight-stationary with tk = K, so the
// row sums run whole on each step and no `psum`.
// CHECK-LABEL: func.func @rms_rows_dynamic
// CHECK: "novella.vop"() {a = "a", {{.*}}cols = 128 : i64, {{.*}}dst = "pss", {{.*}}fn = "ROWSUM"
// CHECK-NOT: psum
// CHECK: tiles = {tk = 128 : i64, tm = 64 : i64, tn = 64 : i64, ws = 1 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 4096]}} {
  func.func @rms_rows_dynamic(%x: tensor<?x128xf32, affine_map<()[s0] -> (s0, 128)>>, %w: tensor<64x128xf32>, %b: tensor<64xf32>, %nw: tensor<128xf32>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>> {
    %0 = "novella.fused_linear"(%x, %w, %b, %nw) {act = "none", norm_eps = 9.99999997E-7 : f32, norm_input = true, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 0>} : (tensor<?x128xf32, affine_map<()[s0] -> (s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>, tensor<128xf32>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
    return %0 : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  }
}
