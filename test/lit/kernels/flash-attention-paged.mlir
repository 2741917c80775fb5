// RUN: novella-opt %s --novella-legalize --novella-kv-cache=page-size=16 --split-input-file | FileCheck %s --check-prefix=KV
// RUN: novella-opt %s --novella-legalize --novella-kv-cache=page-size=16 --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s
//
// novella.flash_attention over the paged KV cache (kernels/flash_attention.py, kernels/kv_cache.py).

// Decode, one query row, `past` symbolic, GQA (4 query heads, 2 cache heads): the fused op reads
// the appended caches themselves (the head repeats are erased; novella.kv_group = 2) and records
// their pages as novella.paged_key / novella.paged_value. One query row over a GQA cache is
// packed: grid dim 0 walks the 2 cache heads, the 2 query heads sharing one are the 2 rows of its
// query block (q and the result 32 elements apart per cache head). The query rows of both cache heads
// are loaded and scaled once (q_held = 4 rows), each head's score MATMUL reading its 2 rows 32 apart,
// so a head's step loads only its keys, values (and mask). Its key/value tiles span pages
// (tk = 64 = 4 pages, picked by the flash cost model scored over sampled pasts,
// `flash_decode.plan_samples`): one LOAD per page into the tile's rows
// (buf_offset 256 per page), chained (docs/isa.md, LOAD `chain`), the first page of K and of V too:
// the step's loads are one chain after the previous step's (`flash_decode.chained_loads`). Page 0 of tile d2
// of cache head d0 is page 4 * d2 (512 elements apart), head d0 inside it (256 apart), min(16,
// s0 + 1 - 64 * d2) rows; page 1 is page 4 * d2 + 1, or where it is past the sequence the last page
// ((s0 floordiv 16) * 512) with no rows: its row count is min(16 [x >= 1], x + 64 [x <= 0]), x its
// rows left, the [x >= 1] a ceildiv by the grid limit. All of them addresses in the paged window
// that the runtime maps per step.
// KV-LABEL: func.func @decode
// KV: %[[K:.*]] = "novella.kv_append"(%arg1, %arg3) {{{.*}}slot = 0 : i64}}
// KV: %[[V:.*]] = "novella.kv_append"(%arg2, %arg4) {{{.*}}slot = 1 : i64}}
// KV-NOT: novella.broadcast
// KV: %[[O:.*]] = "novella.flash_attention"(%arg0, %[[K]], %[[V]]{{.*}}) {{{.*}}novella.kv_group = 2 : i64, novella.paged_key = {{{.*}}slot = 0 : i64}, novella.paged_value = {{{.*}}slot = 1 : i64}
// KV: return %[[O]], %[[K]], %[[V]]
// CHECK-DAG: #[[PAGE:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2 * 2048 + d0 * 256)>
// CHECK-DAG: #[[QROW:.*]] = affine_map<(d0, d1, d2)[s0] -> (d0 * 32)>
// CHECK-DAG: #[[KEYS:.*]] = affine_map<(d0, d1, d2)[s0] -> (16, d2 * -64 + s0 + 1)>
// CHECK-DAG: #[[PAGE1:.*]] = affine_map<(d0, d1, d2)[s0] -> ((d2 * 4 + 1) * 512 + d0 * 256, d0 * 256 + (s0 floordiv 16) * 512)>
// CHECK-DAG: #[[ROWS1:.*]] = affine_map<(d0, d1, d2)[s0] -> (((-(d2 * 64 + 16) + s0 + 1) ceildiv 16777216) * 16, -(d2 * 64 + 16) + s0 + 1 - ((-(d2 * 64 + 16) + s0 + 1) ceildiv 16777216) * 64 + 64)>
// CHECK-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (2, 1, (s0 + 1) ceildiv 64)>
// CHECK-LABEL: func.func @decode
// CHECK: %[[K:.*]] = "novella.macro"() ({
// CHECK: kernel = "novella.kv_append"
// CHECK: %[[V:.*]] = "novella.macro"() ({
// CHECK: kernel = "novella.kv_append"
// CHECK: "novella.dma_load"(%arg0) {buffer = "q", cols = 16 : i64, dram_offset = 0 : i64, dram_stride = 16 : i64, row_bound = 4 : i64, {{.*}}rows = 4 : i64
// CHECK: "novella.dma_load"(%[[K]]) {buf_offset = 0 : i64, buffer = "k", chain = 1 : i64, cols = 16 : i64, dram_offset = #[[PAGE]], dram_stride = 16 : i64, {{.*}}rows = #[[KEYS]], {{.*}}tensor = 1 : i64}
// CHECK-NEXT: "novella.dma_load"(%[[K]]) {buf_offset = 256 : i64, buffer = "k", chain = 1 : i64, cols = 16 : i64, dram_offset = #[[PAGE1]], dram_stride = 16 : i64, row_bound = 16 : i64, row_start = 0 : i64, row_step = 1 : i64, rows = #[[ROWS1]], {{.*}}tensor = 1 : i64}
// CHECK: "novella.dma_load"(%[[V]]) {buf_offset = 0 : i64, buffer = "v", chain = 1 : i64, cols = 16 : i64, dram_offset = #[[PAGE]], dram_stride = 16 : i64, {{.*}}rows = #[[KEYS]], {{.*}}tensor = 2 : i64}
// CHECK-NEXT: "novella.dma_load"(%[[V]]) {buf_offset = 256 : i64, buffer = "v", chain = 1 : i64, cols = 16 : i64, dram_offset = #[[PAGE1]], dram_stride = 16 : i64, {{.*}}rows = #[[ROWS1]], {{.*}}tensor = 2 : i64}
// CHECK: "novella.mma"() {{{.*}}lhs = "q", lhs_offset = #[[QROW]], m = 2 : i64
// CHECK: grid = #[[GRID]], kernel = "novella.flash_attention", {{.*}}tiles = {{{.*}}pipelined = 0 : i64, q_held = 4 : i64, s_slots = 1 : i64, tk = 64 : i64, tq = 2 : i64}
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @decode(%q: tensor<1x4x1x16xf32>, %pk: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %pv: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %nk: tensor<1x2x1x16xf32>, %nv: tensor<1x2x1x16xf32>) -> (tensor<1x4x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%pk, %nk) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %v = "novella.kv_append"(%pv, %nv) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %kg = "novella.reshape"(%k) : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) -> tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>
    %kb = "novella.broadcast"(%kg) : (tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>
    %kr = "novella.reshape"(%kb) : (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %vg = "novella.reshape"(%v) : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) -> tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>
    %vb = "novella.broadcast"(%vg) : (tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>
    %vr = "novella.reshape"(%vb) : (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %o = "novella.attention"(%q, %kr, %vr) {scale = 0.25 : f32} : (tensor<1x4x1x16xf32>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>) -> tensor<1x4x1x16xf32>
    return %o, %k, %v : tensor<1x4x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
  }
}

// -----

// Prefill, causal, GPT-2 style: the fused op reads k and v heads-minor ([1, T, H, D], as the
// projection stores them), and the model returns their head transposes as the cache: those are
// recognized as cache tensors and returned through novella.kv_write (slots 0, 1); the fused op
// itself reads the contiguous k and v (no novella.paged_key: nothing is in a page before the write).
// KV-LABEL: func.func @prefill
// KV: %[[KT:.*]] = "novella.transpose"(%arg1)
// KV: %[[VT:.*]] = "novella.transpose"(%arg2)
// KV: %[[O:.*]] = "novella.flash_attention"(%arg0, %arg1, %arg2) {causal = 1 : i64, heads_minor = array<i64: 1, 1, 1, 1>
// KV-NOT: novella.paged_key
// KV: %[[WK:.*]] = "novella.kv_write"(%[[KT]]) {{{.*}}slot = 0 : i64}}
// KV: %[[WV:.*]] = "novella.kv_write"(%[[VT]]) {{{.*}}slot = 1 : i64}}
// KV: return %[[O]], %[[WK]], %[[WV]]
// CHECK-LABEL: func.func @prefill
// CHECK: kernel = "novella.flash_attention", {{.*}}tiles = {{{.*}}pipelined = 1 : i64, {{.*}}tk = [[T:[0-9]+]] : i64, tq = [[T]] : i64}
// CHECK: kernel = "novella.kv_write"
// CHECK: kernel = "novella.kv_write"
module attributes {novella.symbols = {s0 = ["T", 1, 1024]}} {
  func.func @prefill(%q: tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>, %k: tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>, %v: tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>, %m: tensor<1x1x?x?xf32, affine_map<()[s0] -> (1, 1, s0, s0)>>) -> (tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>) {
    %qt = "novella.transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
    %kt = "novella.transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
    %vt = "novella.transpose"(%v) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
    %s = "novella.matmul"(%qt, %kt) {transpose_rhs = true} : (tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>) -> tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>
    %a = "novella.add"(%s, %m) {novella.causal} : (tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>, tensor<1x1x?x?xf32, affine_map<()[s0] -> (1, 1, s0, s0)>>) -> tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>
    %p = "novella.softmax"(%a) {novella.scale = 0.25 : f32} : (tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>) -> tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>
    %o = "novella.matmul"(%p, %vt) {transpose_rhs = false} : (tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
    %ot = "novella.transpose"(%o) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>) -> tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>
    return %ot, %kt, %vt : tensor<1x?x4x16xf32, affine_map<()[s0] -> (1, s0, 4, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
  }
}

// -----

// A batched decode step (two sequences, cache [2, 2, ?, 16] paged per sequence, a mask row per
// sequence): each key tile of a lane is guarded by that lane's field, symbol s1 of the guard's set
// (one past the module's symbols) with `lane` the grid point's lane (a step takes 2 heads, the two
// of one sequence: lane d0). Tile d2 runs where it holds a key at or after the lane's start
// (64 * d2 + 63 >= s1: its K, V and mask LOADs, the score MATMUL, the mask ADD), opens the online
// softmax where it is the lane's first (64 * d2 <= s1) and rescales after it (64 * d2 > s1); the
// output is written at the last tile of the clock, which every lane has.
// CHECK-DAG: #[[LANE:.*]] = affine_map<(d0, d1, d2)[s0] -> (d0)>
// CHECK-DAG: #[[ON:.*]] = affine_set<(d0, d1, d2)[s0, s1] : (d2 * 64 - s1 + 63 >= 0)>
// CHECK-DAG: #[[OPEN:.*]] = affine_set<(d0, d1, d2)[s0, s1] : (d2 * 64 - s1 + 63 >= 0, d2 * -64 + s1 >= 0)>
// CHECK-DAG: #[[REST:.*]] = affine_set<(d0, d1, d2)[s0, s1] : (d2 * 64 - s1 + 63 >= 0, d2 * 64 - s1 - 1 >= 0)>
// CHECK-DAG: #[[LAST:.*]] = affine_set<(d0, d1, d2)[s0] : (-d2 + (s0 + 1) ceildiv 64 - 1 == 0)>
// CHECK-LABEL: func.func @batched
// CHECK: "novella.dma_load"(%[[K:.*]]) {buf_offset = 0 : i64, buffer = "k", {{.*}}lane = #[[LANE]], {{.*}}tensor = 1 : i64, when = #[[ON]]}
// CHECK: "novella.dma_load"(%arg5) {buffer = "mask", {{.*}}lane = #[[LANE]], {{.*}}when = #[[ON]]}
// CHECK: "novella.mma"() {{{.*}}acc = "s", {{.*}}lane = #[[LANE]], {{.*}}when = #[[ON]]}
// CHECK: "novella.vop"() {{{.*}}dst = "m", {{.*}}fn = "ROWMAX", lane = #[[LANE]], {{.*}}when = #[[OPEN]]}
// CHECK: "novella.mma"() {{{.*}}accumulate = 1 : i64, {{.*}}lane = #[[LANE]], {{.*}}rhs = "v", {{.*}}when = #[[REST]]}
// CHECK: "novella.vop"() {{{.*}}when = #[[LAST]]}
// CHECK: grid = #{{.*}}, kernel = "novella.flash_attention", {{.*}}tiles = {{{.*}}heads = 2 : i64, {{.*}}tk = 64 : i64
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @batched(%q: tensor<2x2x1x16xf32>, %pk: tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0, 16)>>, %pv: tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0, 16)>>, %nk: tensor<2x2x1x16xf32>, %nv: tensor<2x2x1x16xf32>, %m: tensor<2x1x1x?xf32, affine_map<()[s0] -> (2, 1, 1, s0 + 1)>>) -> (tensor<2x2x1x16xf32>, tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>, tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%pk, %nk) {dim = 2 : i64} : (tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0, 16)>>, tensor<2x2x1x16xf32>) -> tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>
    %v = "novella.kv_append"(%pv, %nv) {dim = 2 : i64} : (tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0, 16)>>, tensor<2x2x1x16xf32>) -> tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>
    %o = "novella.flash_attention"(%q, %k, %v, %m) {causal = 0 : i64, heads_minor = array<i64: 0, 0, 0, 0>, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 0.25 : f32} : (tensor<2x2x1x16xf32>, tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>, tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>, tensor<2x1x1x?xf32, affine_map<()[s0] -> (2, 1, 1, s0 + 1)>>) -> tensor<2x2x1x16xf32>
    return %o, %k, %v : tensor<2x2x1x16xf32>, tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>, tensor<2x2x?x16xf32, affine_map<()[s0] -> (2, 2, s0 + 1, 16)>>
  }
}
