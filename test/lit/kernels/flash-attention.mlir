// RUN: novella-opt %s --novella-legalize --split-input-file | FileCheck %s --check-prefix=LEGAL
// RUN: novella-opt %s --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s
// RUN: novella-opt %s -p 'builtin.module(novella-legalize{fuse-attention=0})' --split-input-file | FileCheck %s --check-prefix=UNFUSED
//
// novella.flash_attention (kernels/flash_attention.py): one macro, grid (batch, query block,
// key/value step); the scores stay in the accumulator ("s"), the running max "m" and sum "l" in the
// scratchpad, the output accumulates in "o"; only "out" is stored, after the last key/value tile.
// The cost model's pick at the nominal length: tq = 128 query rows, tk = 32 keys, pipelined: step
// d2 runs the score MATMUL of tile d2 into score slot d2 mod 2 (so the matrix unit has it while the
// vector unit runs the exp of tile d2 - 1 from the other slot), one step more per query block; the
// query alternates between consecutive blocks (q_blocks). `ones = 3` (FUSED): the score MATMUL also
// writes the row maxima of its slot into "mx" (rowmax), and EXPSUB writes p = exp(s - max) and the
// row sums of p into "ls" (rowsum), so no ROWMAX or ROWSUM pass reads the scores. K of tile d2 and V
// of tile d2 - 1 stream through two slots unguarded (the steps past either end load rows out of
// bounds); "p" has two slots, so the next softmax fills one while P @ V reads the other.

// LEGAL-LABEL: func.func @sdpa
// LEGAL-SAME: (%[[Q:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[K:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[V:.*]]: tensor<2x?x64xf32
// LEGAL: %[[O:.*]] = "novella.flash_attention"(%[[Q]], %[[K]], %[[V]]) {causal = 0 : i64, {{.*}}scale = 1.250000e-01 : f32}
// LEGAL-NOT: novella.matmul
// LEGAL-NOT: novella.softmax
// LEGAL: return %[[O]]
// CHECK-DAG: #[[QSLOT:.*]] = affine_map<(d0, d1, d2)[s0] -> (((d0 * (s0 ceildiv 128) + d1) mod 2) * 8192)>
// CHECK-DAG: #[[ROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (128, d1 * -128 + s0)>
// CHECK-DAG: #[[KROW:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2 * 32)>
// CHECK-DAG: #[[VROW:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d2 - 1) * 32)>
// CHECK-DAG: #[[KROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (32, d2 * -32 + s0 + ((d2 - s0 ceildiv 32 + 1) ceildiv 16777216) * 32, (-d2 + s0 ceildiv 32) * 16777216)>
// CHECK-DAG: #[[VROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (32, (d2 - 1) * -32 + s0, d2 * 16777216)>
// CHECK-DAG: #[[SQK:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d2 mod 2) * 4096)>
// CHECK-DAG: #[[MQK:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d2 mod 2) * 128)>
// CHECK-DAG: #[[MSOFT:.*]] = affine_map<(d0, d1, d2)[s0] -> (((d2 - 1) mod 2) * 128)>
// CHECK-DAG: #[[SSOFT:.*]] = affine_map<(d0, d1, d2)[s0] -> (((d2 - 1) mod 2) * 4096)>
// CHECK-DAG: #[[PREV:.*]] = affine_map<(d0, d1, d2)[s0] -> (32, (d2 - 1) * -32 + s0)>
// CHECK-DAG: #[[KEYS:.*]] = affine_map<(d0, d1, d2)[s0] -> (32, d2 * -32 + s0)>
// CHECK-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (2, s0 ceildiv 128, s0 ceildiv 32 + 1)>
// CHECK-DAG: #[[FIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d2 == 0)>
// CHECK-DAG: #[[OPEN:.*]] = affine_set<(d0, d1, d2)[s0] : (d2 - 1 == 0)>
// CHECK-DAG: #[[REST:.*]] = affine_set<(d0, d1, d2)[s0] : (d2 - 2 >= 0)>
// CHECK-DAG: #[[QK:.*]] = affine_set<(d0, d1, d2)[s0] : (-d2 + s0 ceildiv 32 - 1 >= 0)>
// CHECK-DAG: #[[LAST:.*]] = affine_set<(d0, d1, d2)[s0] : (-(d2 - 1) + s0 ceildiv 32 - 1 == 0)>
// CHECK-LABEL: func.func @sdpa
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x?x64xf32, {{.*}}, %[[K:[^:]*]]: tensor<2x?x64xf32, {{.*}}, %[[V:[^:]*]]: tensor<2x?x64xf32
// CHECK: "novella.dma_load"(%[[Q]]) {buf_offset = #[[QSLOT]], buffer = "q", {{.*}}rows = #[[ROWS]], {{.*}}when = #[[FIRST]]}
// CHECK-NEXT: "novella.vop"() {a = "q", {{.*}}fn = "MUL", imm = 1.250000e-01 : f32, mode = "SCALAR", rows = #[[ROWS]], when = #[[FIRST]]}
// CHECK-NEXT: "novella.dma_load"(%[[K]]) {buffer = "k", {{.*}}row_start = #[[KROW]], {{.*}}rows = #[[KROWS]], {{.*}}tensor = 1 : i64}
// CHECK-NEXT: "novella.dma_load"(%[[V]]) {buffer = "v", {{.*}}row_start = #[[VROW]], {{.*}}rows = #[[VROWS]], {{.*}}tensor = 2 : i64}
// CHECK-NEXT: "novella.mma"() {{{.*}}acc = "s", acc_offset = #[[SQK]], {{.*}}lhs = "q", {{.*}}m = #[[ROWS]], max = "mx", max_offset = #[[MQK]], n = #[[KEYS]], rhs = "k", rowmax = 1 : i64, transpose_b = 1 : i64, when = #[[QK]]}
// CHECK-NEXT: "novella.vop"() {a = "mx", a_offset = #[[MSOFT]], {{.*}}dst = "m", {{.*}}fn = "COPY", rows = 1 : i64, when = #[[OPEN]]}
// CHECK-NEXT: "novella.vop"() {a = "s", a_offset = #[[SSOFT]], {{.*}}b = "m", {{.*}}cols = #[[PREV]], dst = "p", {{.*}}fn = "EXPSUB", mode = "COL", rows = #[[ROWS]], rowsum = 1 : i64, sum = "ls", when = #[[OPEN]]}
// CHECK-NEXT: "novella.vop"() {a = "mx", a_offset = #[[MSOFT]], {{.*}}b = "m", {{.*}}dst = "cm", {{.*}}fn = "MAX", rows = 1 : i64, when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {a = "s", a_offset = #[[SSOFT]], {{.*}}b = "cm", {{.*}}dst = "p", {{.*}}fn = "EXPSUB", mode = "COL", rows = #[[ROWS]], rowsum = 1 : i64, sum = "ls", when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {a = "ls", {{.*}}dst = "l", {{.*}}fn = "COPY", rows = 1 : i64, when = #[[OPEN]]}
// CHECK-NEXT: "novella.mma"() {{{.*}}acc = "o", {{.*}}accumulate = 0 : i64, {{.*}}k = #[[PREV]], lhs = "p", {{.*}}rhs = "v", transpose_b = 0 : i64, when = #[[OPEN]]}
// CHECK-NEXT: "novella.vop"() {a = "m", {{.*}}b = "cm", {{.*}}dst = "t", {{.*}}fn = "EXPSUB", rows = 1 : i64, when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {a = "cm", {{.*}}dst = "m", {{.*}}fn = "COPY", rows = 1 : i64, when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {a = "l", {{.*}}b = "t", {{.*}}dst = "l", {{.*}}fn = "MUL", rows = 1 : i64, when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {a = "l", {{.*}}b = "ls", {{.*}}dst = "l", {{.*}}fn = "ADD", rows = 1 : i64, when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {a = "o", {{.*}}b = "t", {{.*}}dst = "o", {{.*}}fn = "MUL", mode = "COL", rows = #[[ROWS]], when = #[[REST]]}
// CHECK-NEXT: "novella.mma"() {{{.*}}acc = "o", {{.*}}accumulate = 1 : i64, {{.*}}when = #[[REST]]}
// CHECK-NEXT: "novella.vop"() {{{.*}}dst = "t", {{.*}}fn = "FILL", imm = 1.000000e+00 : f32, rows = 1 : i64, when = #[[LAST]]}
// CHECK-NEXT: "novella.vop"() {a = "t", {{.*}}b = "l", {{.*}}dst = "t", {{.*}}fn = "DIV", rows = 1 : i64, when = #[[LAST]]}
// CHECK-NEXT: "novella.vop"() {a = "o", {{.*}}b = "t", {{.*}}dst = "out", {{.*}}fn = "MUL", mode = "COL", rows = #[[ROWS]], when = #[[LAST]]}
// CHECK-NEXT: "novella.dma_store"() {buffer = "out", {{.*}}when = #[[LAST]]}
// CHECK-NOT: novella.dma_store
// CHECK: mx = ["spad", {{[0-9]+}}, 256]{{.*}}p = ["spad", {{[0-9]+}}, 4096, 2]{{.*}}grid = #[[GRID]], kernel = "novella.flash_attention", {{.*}}tiles = {expsub = 1 : i64, ones = 3 : i64, pipelined = 1 : i64, q_blocks = 1 : i64, s_slots = 2 : i64, tk = 32 : i64, tq = 128 : i64}
// UNFUSED-LABEL: func.func @sdpa
// UNFUSED: "novella.matmul"
// UNFUSED: "novella.softmax"
// UNFUSED: "novella.matmul"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @sdpa(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %v: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>> {
    %0 = "novella.attention"(%q, %k, %v) {scale = 0.125 : f32} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
    return %0 : tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
  }
}

// -----

// The eager chain with an additive mask broadcast over the batch: the mask becomes the fourth
// operand, loaded one [128, 32] tile per step (batch stride 0) and added to the scores; the running
// max starts at -FLT_MAX (a fully masked tile row gives exp(-inf) = 0, not NaN). Here the scores have
// two slots (tile i in slot i mod 2), so the score MATMUL of tile d2 comes first and the softmax
// of tile d2 - 1 takes p = exp(s - m) in one EXPSUB pass.
// LEGAL-LABEL: func.func @masked
// LEGAL-SAME: (%[[Q:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[K:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[V:.*]]: tensor<2x?x64xf32, {{.*}}>, %[[M:.*]]: tensor<1x?x?xf32
// LEGAL: %[[O:.*]] = "novella.flash_attention"(%[[Q]], %[[K]], %[[V]], %[[M]]) {causal = 0 : i64, {{.*}}scale = 1.000000e+00 : f32}
// LEGAL-NOT: novella.add
// LEGAL: return %[[O]]
// CHECK-DAG: #[[SLOT:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d2 mod 2) * 4096)>
// CHECK-DAG: #[[PREVSLOT:.*]] = affine_map<(d0, d1, d2)[s0] -> (((d2 - 1) mod 2) * 4096)>
// CHECK-LABEL: func.func @masked
// CHECK-SAME: %[[M:[^:]*]]: tensor<1x?x?xf32
// CHECK: "novella.dma_load"(%[[M]]) {buffer = "mask", {{.*}}dram_offset = #[[MOFF:[^,]*]], {{.*}}tensor = 3 : i64}
// CHECK-NEXT: "novella.mma"() {{{.*}}acc = "s", acc_offset = #[[SLOT]]
// CHECK-NEXT: "novella.vop"() {a = "s", a_offset = #[[PREVSLOT]], {{.*}}b = "mask", {{.*}}dst = "s", dst_offset = #[[PREVSLOT]], {{.*}}fn = "ADD"
// CHECK: fn = "MAX", imm = -3.40282347E+38 : f32, mode = "SCALAR"
// CHECK-NEXT: "novella.vop"() {a = "s", a_offset = #[[PREVSLOT]], {{.*}}b = "m", {{.*}}dst = "p", {{.*}}fn = "EXPSUB", mode = "COL"
// CHECK-NOT: fn = "EXP", mode = "TENSOR"
// CHECK-NOT: imm = 1.17549435E-38
// The query buffer alternates between consecutive query blocks (q_blocks, `[spad, 0, 8192, 2, 1]`).
// CHECK: q = ["spad", 0, 8192, 2, 1]{{.*}}kernel = "novella.flash_attention", {{.*}}tiles = {expsub = 1 : i64, ones = 0 : i64, pipelined = 1 : i64, q_blocks = 1 : i64, s_slots = 2 : i64, tk = 32 : i64, tq = 128 : i64}
// UNFUSED-LABEL: func.func @masked
// UNFUSED: "novella.add"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @masked(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %v: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %m: tensor<1x?x?xf32, affine_map<()[s0] -> (1, s0, s0)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>> {
    %s = "novella.matmul"(%q, %k) {transpose_rhs = true} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %a = "novella.add"(%s, %m) : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<1x?x?xf32, affine_map<()[s0] -> (1, s0, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %p = "novella.softmax"(%a) : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %0 = "novella.matmul"(%p, %v) {transpose_rhs = false} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
    return %0 : tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
  }
}

// -----

// A safe softmax (SDPA's, `_safe_softmax`): a query row whose keys are all masked gives 0. Its
// P and O are 0 (the floored max makes exp(-inf) = 0) and so is its row sum l: the last step floors
// l at f32's least normal before 1 / l (0 * 8.5e37 = 0; any other row has l >= 1). The unsafe @masked
// above takes 1 / l directly, as torch.softmax gives NaN there.
// LEGAL-LABEL: func.func @masked_safe
// LEGAL: "novella.flash_attention"({{.*}}) {causal = 0 : i64, {{.*}}safe = true, scale = 1.000000e+00 : f32}
// CHECK-LABEL: func.func @masked_safe
// CHECK: "novella.vop"() {a = "l", {{.*}}dst = "l", {{.*}}fn = "MAX", imm = 1.17549435E-38 : f32, mode = "SCALAR", rows = 1 : i64, when = #[[LAST:[^}]*]]}
// CHECK-NEXT: "novella.vop"() {{{.*}}dst = "t", {{.*}}fn = "FILL", {{.*}}when = #[[LAST]]}
// CHECK-NEXT: "novella.vop"() {a = "t", {{.*}}b = "l", {{.*}}dst = "t", {{.*}}fn = "DIV", {{.*}}when = #[[LAST]]}
// CHECK-NEXT: "novella.vop"() {a = "o", {{.*}}b = "t", {{.*}}dst = "out", {{.*}}fn = "MUL", mode = "COL", {{.*}}when = #[[LAST]]}
// CHECK-NEXT: "novella.dma_store"() {buffer = "out"
// UNFUSED-LABEL: func.func @masked_safe
// UNFUSED: "novella.softmax"({{.*}}) {safe = true}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @masked_safe(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %v: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %m: tensor<1x?x?xf32, affine_map<()[s0] -> (1, s0, s0)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>> {
    %s = "novella.matmul"(%q, %k) {transpose_rhs = true} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %a = "novella.add"(%s, %m) : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<1x?x?xf32, affine_map<()[s0] -> (1, s0, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %p = "novella.softmax"(%a) {safe = true} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %0 = "novella.matmul"(%p, %v) {transpose_rhs = false} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
    return %0 : tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
  }
}

// -----

// A causal mask (the frontend tags its add with novella.causal) becomes causal = 1 and is dropped:
// square tiles (64 x 64, two score slots), pipelined: the score MATMUL of tile d2 runs while d1 - d2 >= 0, the
// softmax and P @ V of tile d2 - 1 while d1 - (d2 - 1) >= 0 (the tiles above the diagonal are
// skipped, so the K/V loads are guarded); the diagonal tile adds a staircase of -FLT_MAX (finite: an
// artifact stores no -inf) built once, and the output is stored after the diagonal tile.
// LEGAL-LABEL: func.func @causal
// LEGAL: "novella.flash_attention"(%{{.*}}, %{{.*}}, %{{.*}}) {causal = 1 : i64, {{.*}}scale = 5.000000e-01 : f32}
// LEGAL-NOT: novella.add
// CHECK-DAG: #[[ONCE:.*]] = affine_set<(d0, d1, d2)[s0] : (d0 == 0, d1 == 0, d2 == 0)>
// CHECK-DAG: #[[LIVE:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 - d2 >= 0)>
// CHECK-DAG: #[[SOFT:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 - (d2 - 1) >= 0, d2 - 1 >= 0)>
// CHECK-DAG: #[[DIAG:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 - (d2 - 1) == 0)>
// CHECK-LABEL: func.func @causal
// CHECK: "novella.vop"() {{{.*}}dst = "tri", {{.*}}fn = "FILL", imm = -3.40282347E+38 : f32, {{.*}}when = #[[ONCE]]}
// CHECK: "novella.dma_load"(%{{.*}}) {buffer = "k", {{.*}}when = #[[LIVE]]}
// CHECK-NEXT: "novella.dma_load"(%{{.*}}) {buffer = "v", {{.*}}when = #[[SOFT]]}
// CHECK-NEXT: "novella.mma"() {{{.*}}acc = "s", {{.*}}when = #[[LIVE]]}
// CHECK-NEXT: "novella.vop"() {a = "s", {{.*}}b = "tri", {{.*}}fn = "ADD", {{.*}}when = #[[DIAG]]}
// CHECK: "novella.dma_store"() {buffer = "out", {{.*}}when = #[[DIAG]]}
// CHECK: kernel = "novella.flash_attention", {{.*}}tiles = {expsub = 1 : i64, ones = 0 : i64, pipelined = 1 : i64, s_slots = 2 : i64, tk = 64 : i64, tq = 64 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @causal(%q: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %k: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %v: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %m: tensor<1x?x?xf32, affine_map<()[s0] -> (1, s0, s0)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>> {
    %s = "novella.matmul"(%q, %k) {transpose_rhs = true} : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %a = "novella.add"(%s, %m) {novella.causal} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<1x?x?xf32, affine_map<()[s0] -> (1, s0, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %p = "novella.softmax"(%a) {novella.scale = 0.5 : f32} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>) -> tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>
    %0 = "novella.matmul"(%p, %v) {transpose_rhs = false} : (tensor<2x?x?xf32, affine_map<()[s0] -> (2, s0, s0)>>, tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>) -> tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
    return %0 : tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>
  }
}

// -----

// Head transposes around the fused op are absorbed: q, k and v are read, and the result written,
// in the projections' [1, T, H, D] layout (heads_minor; row stride H * D = 128, head h at column
// h * 64), and the scalar mul of q folds into the scale (0.5 * 0.25).
// LEGAL-LABEL: func.func @heads
// LEGAL-SAME: (%[[Q:[^:]*]]: tensor<1x?x2x64xf32, {{.*}}, %[[K:[^:]*]]: tensor<1x?x2x64xf32, {{.*}}, %[[V:[^:]*]]: tensor<1x?x2x64xf32
// LEGAL-NOT: novella.transpose
// LEGAL-NOT: novella.scalar
// LEGAL: %[[O:.*]] = "novella.flash_attention"(%[[Q]], %[[K]], %[[V]]) {causal = 0 : i64, heads_minor = array<i64: 1, 1, 1, 1>, {{.*}}scale = 1.250000e-01 : f32} : {{.*}} -> tensor<1x?x2x64xf32
// LEGAL-NOT: novella.transpose
// LEGAL: return %[[O]]
// CHECK-DAG: #[[BASE:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d0 floordiv 2) * (s0 * 128) + (d0 mod 2) * 64)>
// CHECK-LABEL: func.func @heads
// CHECK: "novella.dma_load"(%{{.*}}) {{{.*}}buffer = "q", cols = 64 : i64, dram_offset = #[[BASE]], dram_stride = 128 : i64
// CHECK: "novella.dma_store"() {buffer = "out", cols = 64 : i64, dram_offset = #[[BASE]], dram_stride = 128 : i64
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @heads(%q: tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>, %k: tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>, %v: tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>) -> tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>> {
    %qs = "novella.scalar"(%q) {fn = "mul", value = 0.5 : f32} : (tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>) -> tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>
    %qt = "novella.transpose"(%qs) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>) -> tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>
    %kt = "novella.transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>) -> tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>
    %vt = "novella.transpose"(%v) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>) -> tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>
    %0 = "novella.attention"(%qt, %kt, %vt) {scale = 0.25 : f32} : (tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>, tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>, tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>) -> tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>
    %y = "novella.transpose"(%0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x2x?x64xf32, affine_map<()[s0] -> (1, 2, s0, 64)>>) -> tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>
    return %y : tensor<1x?x2x64xf32, affine_map<()[s0] -> (1, s0, 2, 64)>>
  }
}
