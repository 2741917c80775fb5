// RUN: novella-opt %s --novella-macro-gen --split-input-file | FileCheck %s

// The tiled linear becomes a macro whose region is one grid step (n, m, k):
// the weight slab loads only on the first step of each n block, the bias row
// once, on the op's first step, the row tile of x is loaded at row d1 * 64 with
// min(64, T - 64 * d1) rows (the partial last tile), the matmul accumulates from
// the second k step on, and the epilogue (bias, relu, store) runs on the last k
// step, adding the n block's columns of the bias row. Every LOAD continues the load
// queue's DMA chain (chain = 1): one exposed latency, not one per LOAD.
// CHECK-DAG: #[[$WOFF:.*]] = affine_map<(d0, d1, d2)[s0] -> (d0 * 2048)>
// CHECK-DAG: #[[$KOFF:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2 * 64)>
// CHECK-DAG: #[[$BOUND:.*]] = affine_map<(d0, d1, d2)[s0] -> (s0)>
// CHECK-DAG: #[[$ROW0:.*]] = affine_map<(d0, d1, d2)[s0] -> (d1 * 64)>
// CHECK-DAG: #[[$ROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (64, d1 * -64 + s0)>
// CHECK-DAG: #[[$ACCUM:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2, 1)>
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 64, 1)>
// CHECK-DAG: #[[$DRAM:.*]] = affine_map<()[s0] -> (s0 * 64 + 2080)>
// CHECK-DAG: #[[$BCOL:.*]] = affine_map<(d0, d1, d2)[s0] -> (d0 * 32)>
// CHECK-DAG: #[[$FIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 == 0)>
// CHECK-DAG: #[[$OPFIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d0 == 0, d1 == 0, d2 == 0)>
// CHECK-DAG: #[[$LASTK:.*]] = affine_set<(d0, d1, d2)[s0] : (-d2 == 0)>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w"
// CHECK: %[[B:.*]] = "novella.weight"() {name = "b"
// CHECK: %[[M:.*]] = "novella.macro"() ({
// CHECK-NEXT: "novella.dma_load"(%[[W]]) {buffer = "w", chain = 1 : i64, cols = 64 : i64, dram_offset = #[[$WOFF]], {{.*}}rows = 32 : i64, {{.*}}tensor = 1 : i64, when = #[[$FIRST]]}
// CHECK-NEXT: "novella.dma_load"(%[[X]]) {buffer = "a", chain = 1 : i64, cols = 64 : i64, dram_offset = #[[$KOFF]], dram_stride = 64 : i64, row_bound = #[[$BOUND]], row_start = #[[$ROW0]], row_step = 1 : i64, rows = #[[$ROWS]], sram_stride = 64 : i64, tensor = 0 : i64}
// CHECK-NEXT: "novella.dma_load"(%[[B]]) {buffer = "bias", chain = 1 : i64, cols = 32 : i64, dram_offset = 0 : i64, {{.*}}rows = 1 : i64, {{.*}}tensor = 2 : i64, when = #[[$OPFIRST]]}
// CHECK-NEXT: "novella.mma"() {{.*}}acc = "acc", {{.*}}accumulate = #[[$ACCUM]], {{.*}}k = 64 : i64, lhs = "a", m = #[[$ROWS]], n = 32 : i64, rhs = "w", rhs_offset = #[[$KOFF]], transpose_b = 1 : i64}
// CHECK-NEXT: "novella.vop"() {a = "acc", {{.*}}b = "bias", b_offset = #[[$BCOL]], {{.*}}dst = "out", {{.*}}fn = "ADD", mode = "ROW", rows = #[[$ROWS]], when = #[[$LASTK]]}
// CHECK-NEXT: "novella.vop"() {a = "out", {{.*}}fn = "RELU", rows = #[[$ROWS]], when = #[[$LASTK]]}
// CHECK-NEXT: "novella.dma_store"() {buffer = "out", {{.*}}row_bound = #[[$BOUND]], row_start = #[[$ROW0]], {{.*}}rows = #[[$ROWS]], {{.*}}when = #[[$LASTK]]}
// CHECK-NEXT: }) {buffers = {a = ["spad", 2048, 4096], acc = ["acc", 0, 2048], bias = ["spad", 6144, 32], out = ["spad", 6176, 2048], w = ["spad", 0, 2048]}, dram = #[[$DRAM]], grid = #[[$GRID]], kernel = "novella.linear", schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tk = 64 : i64, tm = 64 : i64, tn = 32 : i64}} : () -> tensor<1x?x32xf32
// CHECK-NOT: "novella.linear"
// CHECK: return %[[M]]
#map = affine_map<()[s0] -> (1, s0, 64)>
#map1 = affine_map<()[s0] -> (1, s0, 32)>
#map2 = affine_map<()[s0] -> (s0 * 96 + 2080)>
#map3 = affine_map<()[s0] -> (0)>
#map4 = affine_map<()[s0] -> (2048)>
#map5 = affine_map<()[s0] -> (s0 * 64 + 2080)>
#map6 = affine_map<()[s0] -> (1, s0 ceildiv 64, 1)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @linear(%arg0: tensor<1x?x64xf32, #map> {novella.dram = affine_map<()[s0] -> (2080)>}) -> tensor<1x?x32xf32, #map1> attributes {novella.dram_size = #map2} {
    %0 = "novella.weight"() {name = "w", novella.dram = #map3} : () -> tensor<32x64xf32>
    %1 = "novella.weight"() {name = "b", novella.dram = #map4} : () -> tensor<32xf32>
    %2 = "novella.linear"(%arg0, %0, %1) {act = "relu", novella.buffers = {a = ["spad", 2048, 4096], acc = ["acc", 0, 2048], bias = ["spad", 6144, 32], out = ["spad", 6176, 2048], w = ["spad", 0, 2048]}, novella.dram = #map5, novella.grid = #map6, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, novella.tiles = {tk = 64 : i64, tm = 64 : i64, tn = 32 : i64}} : (tensor<1x?x64xf32, #map>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, #map1>
    return %2 : tensor<1x?x32xf32, #map1>
  }
}

// -----

// Input-stationary (ws = 2), grid (m, n, k): the row slab x[m block, :] (all
// 64 columns) loads on the first n and k step of each row tile and stays; the
// weight tile [16, 32] of (n, k) streams every step; the matmul reads the k
// step's columns of the slab (lhs_offset d2 * 32, a_stride 64).
// CHECK-DAG: #[[$WOFF:.*]] = affine_map<(d0, d1, d2)[s0] -> (d1 * 1024 + d2 * 32)>
// CHECK-DAG: #[[$KOFF:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2 * 32)>
// CHECK-DAG: #[[$ROW0:.*]] = affine_map<(d0, d1, d2)[s0] -> (d0 * 64)>
// CHECK-DAG: #[[$ROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (64, d0 * -64 + s0)>
// CHECK-DAG: #[[$SLAB:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 == 0)>
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (s0 ceildiv 64, 2, 2)>
// CHECK-LABEL: func.func @linear_input_stationary
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32
// CHECK: %[[W:.*]] = "novella.weight"() {name = "w"
// CHECK: "novella.macro"() ({
// CHECK-NEXT: "novella.dma_load"(%[[W]]) {buffer = "w", chain = 1 : i64, cols = 32 : i64, dram_offset = #[[$WOFF]], dram_stride = 64 : i64, {{.*}}rows = 16 : i64, {{.*}}tensor = 1 : i64}
// CHECK-NEXT: "novella.dma_load"(%[[X]]) {buffer = "a", chain = 1 : i64, cols = 64 : i64, dram_offset = 0 : i64, dram_stride = 64 : i64, {{.*}}row_start = #[[$ROW0]], {{.*}}rows = #[[$ROWS]], sram_stride = 64 : i64, tensor = 0 : i64, when = #[[$SLAB]]}
// CHECK-NEXT: "novella.dma_load"({{.*}}) {buffer = "bias", chain = 1 : i64, cols = 32 : i64, {{.*}}tensor = 2 : i64, when =
// CHECK-NEXT: "novella.mma"() {a_stride = 64 : i64, {{.*}}k = 32 : i64, lhs = "a", lhs_offset = #[[$KOFF]], m = #[[$ROWS]], n = 16 : i64, rhs = "w", rhs_offset = 0 : i64, transpose_b = 1 : i64}
// CHECK: }) {{{.*}}grid = #[[$GRID]], kernel = "novella.linear", {{.*}}tiles = {tk = 32 : i64, tm = 64 : i64, tn = 16 : i64, ws = 2 : i64}}
#map = affine_map<()[s0] -> (1, s0, 64)>
#map1 = affine_map<()[s0] -> (1, s0, 32)>
#map2 = affine_map<()[s0] -> (s0 * 96 + 2080)>
#map3 = affine_map<()[s0] -> (0)>
#map4 = affine_map<()[s0] -> (2048)>
#map5 = affine_map<()[s0] -> (s0 * 64 + 2080)>
#map6 = affine_map<()[s0] -> (s0 ceildiv 64, 2, 2)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @linear_input_stationary(%arg0: tensor<1x?x64xf32, #map> {novella.dram = affine_map<()[s0] -> (2080)>}) -> tensor<1x?x32xf32, #map1> attributes {novella.dram_size = #map2} {
    %0 = "novella.weight"() {name = "w", novella.dram = #map3} : () -> tensor<32x64xf32>
    %1 = "novella.weight"() {name = "b", novella.dram = #map4} : () -> tensor<32xf32>
    %2 = "novella.linear"(%arg0, %0, %1) {act = "relu", novella.buffers = {a = ["spad", 1056, 4096], acc = ["acc", 0, 1024], bias = ["spad", 1024, 32], out = ["spad", 5152, 1024], w = ["spad", 0, 512]}, novella.dram = #map5, novella.grid = #map6, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, novella.tiles = {tk = 32 : i64, tm = 64 : i64, tn = 16 : i64, ws = 2 : i64}} : (tensor<1x?x64xf32, #map>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, #map1>
    return %2 : tensor<1x?x32xf32, #map1>
  }
}

// -----

// A row broadcast loads its single row once (first step) and adds it with
// mode ROW to every row tile of the symbolic-length operand; the store
// writes the buffer the add produced.
// CHECK-DAG: #[[$ROWS:.*]] = affine_map<(d0)[s0] -> (64, d0 * -64 + s0)>
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (s0 ceildiv 64)>
// CHECK-DAG: #[[$FIRST:.*]] = affine_set<(d0)[s0] : (d0 == 0)>
// CHECK-LABEL: func.func @add_row
// CHECK-SAME: (%[[A:.*]]: tensor<?x64xf32, {{.*}}, %[[B:.*]]: tensor<64xf32>
// CHECK: %[[M:.*]] = "novella.macro"() ({
// CHECK-NEXT: "novella.dma_load"(%[[A]]) {buffer = "[[IN:[a-z0-9_]+]]", {{.*}}rows = #[[$ROWS]], {{.*}}tensor = 0 : i64}
// CHECK-NEXT: "novella.dma_load"(%[[B]]) {buffer = "[[ROW:[a-z0-9_]+]]", {{.*}}rows = 1 : i64, {{.*}}tensor = 1 : i64, when = #[[$FIRST]]}
// CHECK-NEXT: "novella.vop"() {a = "[[IN]]", {{.*}}b = "[[ROW]]", {{.*}}dst = "[[OUT:[a-z0-9_]+]]", {{.*}}fn = "ADD", mode = "ROW", rows = #[[$ROWS]]}
// CHECK-NEXT: "novella.dma_store"() {buffer = "[[OUT]]", {{.*}}rows = #[[$ROWS]], sram_stride = 64 : i64}
// CHECK-NEXT: }) {{{.*}}grid = #[[$GRID]], kernel = "novella.add"
// CHECK: return %[[M]]
#map = affine_map<()[s0] -> (s0, 64)>
#map1 = affine_map<()[s0] -> (s0 * 128 + 64)>
#map2 = affine_map<()[s0] -> (s0 * 64 + 64)>
#map3 = affine_map<()[s0] -> (s0 ceildiv 64)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @add_row(%arg0: tensor<?x64xf32, #map> {novella.dram = affine_map<()[s0] -> (0)>}, %arg1: tensor<64xf32> {novella.dram = affine_map<()[s0] -> (s0 * 64)>}) -> tensor<?x64xf32, #map> attributes {novella.dram_size = #map1} {
    %0 = "novella.add"(%arg0, %arg1) {novella.buffers = {acol = ["spad", 12288, 64], t0 = ["spad", 0, 4096], t1 = ["spad", 4096, 4096], t2 = ["spad", 8192, 4096]}, novella.dram = #map2, novella.grid = #map3, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, novella.tiles = {tm = 64 : i64}} : (tensor<?x64xf32, #map>, tensor<64xf32>) -> tensor<?x64xf32, #map>
    return %0 : tensor<?x64xf32, #map>
  }
}
