// RUN: novella-opt %s --novella-tile --split-input-file --verify-diagnostics | FileCheck %s
// RUN: novella-opt %s --novella-tile=tile-m=16 --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=TM16

// The row tiles of the linear cover the symbolic rows: grid (n, m, k) with a
// ceildiv of T along m (the last tile may be partial); weight, bias row and the
// accumulator are sized by the tile and packed into the scratchpad. The cost
// model keeps the small weight resident (ws = 1); the op is DRAM-bound at every
// row tile, and 16-row tiles have the shortest pipeline fill (simulated: 1% fewer
// cycles than 256 rows at T = 4096); x and the output stream through two slots
// each (the 4th entry, 2), and two accumulator halves defer each block's
// epilogue under the next block's MATMUL (out2: the last block's own output).
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 16, 1)>
// CHECK-LABEL: func.func @linear
// CHECK: "novella.linear"
// CHECK-SAME: novella.buffers = {a = ["spad", 2080, 1024, 2], acc = ["acc", 0, 1024], bias = ["spad", 2048, 32], out = ["spad", 4128, 512, 2], out2 = ["spad", 5152, 512, 2], w = ["spad", 0, 2048]}
// CHECK-SAME: novella.grid = #[[$GRID]]
// CHECK-SAME: novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 16 : i64, tn = 32 : i64, ws = 1 : i64}
// TM16-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 16, 1)>
// TM16-LABEL: func.func @linear
// TM16: novella.grid = #[[$GRID]]{{.*}}novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 16 : i64, tn = 32 : i64, ws = 1 : i64}
#x = affine_map<()[s0] -> (1, s0, 64)>
#y = affine_map<()[s0] -> (1, s0, 32)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @linear(%x: tensor<1x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (2080)>}) -> tensor<1x?x32xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (2048)>} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 2080)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, #x>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, #y>
    return %0 : tensor<1x?x32xf32, #y>
  }
}

// -----

// A small SRAM budget splits N: the weight slab and the accumulator tile shrink
// until every buffer, x and the output with two slots, fits (spad 8192, acc 1024).
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (4, s0 ceildiv 16, 4)>
// CHECK-LABEL: func.func @small_budget
// CHECK: novella.buffers = {a = ["spad", 4160, 1024, 2], acc = ["acc", 0, 512], bias = ["spad", 4096, 64], out = ["spad", 6208, 256, 2], out2 = ["spad", 6720, 256, 2], w = ["spad", 0, 4096]}
// CHECK-SAME: novella.grid = #[[$GRID]]
// CHECK-SAME: novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 16 : i64, tn = 16 : i64, ws = 1 : i64}
// TM16-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (4, s0 ceildiv 16, 4)>
// TM16-LABEL: func.func @small_budget
// TM16: novella.grid = #[[$GRID]]{{.*}}novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 16 : i64, tn = 16 : i64, ws = 1 : i64}
#x = affine_map<()[s0] -> (s0, 256)>
#y = affine_map<()[s0] -> (s0, 64)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @small_budget(%x: tensor<?x256xf32, #x> {novella.dram = affine_map<()[s0] -> (16448)>}) -> tensor<?x64xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64x256xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<64xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 256 + 16448)>, novella.sram_budget = {acc = 1024 : i64, spad = 8192 : i64}} : (tensor<?x256xf32, #x>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<?x64xf32, #y>
    return %0 : tensor<?x64xf32, #y>
  }
}

// -----

// Elementwise ops tile the flattened rows (2 * T) of the row-major view.
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> ((s0 * 2) ceildiv 64)>
// CHECK-LABEL: func.func @add
// CHECK: "novella.add"(%{{.*}}, %{{.*}}) {novella.buffers = {{.*}}t0 = ["spad", 0, 4096, 2]{{.*}}, novella.grid = #[[$GRID]], {{.*}}novella.tiles = {tm = 64 : i64}}
// TM16-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> ((s0 * 2) ceildiv 16)>
// TM16-LABEL: func.func @add
// TM16: novella.grid = #[[$GRID]]{{.*}}novella.tiles = {tm = 16 : i64}
#x = affine_map<()[s0] -> (2, s0, 64)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @add(%a: tensor<2x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (0)>}, %b: tensor<2x?x64xf32, #x> {novella.dram = affine_map<()[s0] -> (s0 * 128)>}) -> tensor<2x?x64xf32, #x> {
    %0 = "novella.add"(%a, %b) {novella.dram = affine_map<()[s0] -> (s0 * 256)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<2x?x64xf32, #x>, tensor<2x?x64xf32, #x>) -> tensor<2x?x64xf32, #x>
    return %0 : tensor<2x?x64xf32, #x>
  }
}

// -----

// Nothing fits a 512-element scratchpad (not even 16-row tiles streaming x and W): the pass fails on the op.
#x = affine_map<()[s0] -> (s0, 256)>
#y = affine_map<()[s0] -> (s0, 64)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @no_fit(%x: tensor<?x256xf32, #x> {novella.dram = affine_map<()[s0] -> (16448)>}) -> tensor<?x64xf32, #y> {
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64x256xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<64xf32>
    // expected-error @+1 {{does not fit the SRAM of this config}}
    %0 = "novella.linear"(%x, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 256 + 16448)>, novella.sram_budget = {acc = 1024 : i64, spad = 512 : i64}} : (tensor<?x256xf32, #x>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<?x64xf32, #y>
    return %0 : tensor<?x64xf32, #y>
  }
}

// -----

// Two symbols (s0 past length P, s1 new length T): T queries scored against P
// keys tile each symbol on its own grid dim, each with a partial last tile. The cost model keeps
// the head dim (64) in one k step, so a 256-row query tile stays resident while 16-key tiles
// stream past it (two slots) and the accumulator stores from two slots.
// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0, s1] -> (1, s1 ceildiv 256, s0 ceildiv 16, 1)>
// CHECK-LABEL: func.func @scores
// CHECK: "novella.matmul"(%arg0, %arg1)
// CHECK-SAME: novella.grid = #[[$GRID]]
// CHECK-SAME: novella.tiles = {tk = 64 : i64, tm = 256 : i64, tn = 16 : i64}
// TM16-DAG: #[[$GRID:.*]] = affine_map<()[s0, s1] -> (1, s1 ceildiv 16, s0 ceildiv 32, 1)>
// TM16-LABEL: func.func @scores
// TM16: novella.grid = #[[$GRID]]
module attributes {novella.symbols = {s0 = ["P", 1, 1023], s1 = ["T", 1, 1024]}} {
  func.func @scores(%q: tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s1, 64)>> {novella.dram = affine_map<()[s0, s1] -> (0)>}, %k: tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0, s1] -> (s1 * 64)>}) -> tensor<1x?x?xf32, affine_map<()[s0, s1] -> (1, s1, s0)>> {
    %0 = "novella.matmul"(%q, %k) {novella.dram = affine_map<()[s0, s1] -> (s1 * 64 + s0 * 64)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, transpose_rhs = true} : (tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s1, 64)>>, tensor<1x?x64xf32, affine_map<()[s0, s1] -> (1, s0, 64)>>) -> tensor<1x?x?xf32, affine_map<()[s0, s1] -> (1, s1, s0)>>
    return %0 : tensor<1x?x?xf32, affine_map<()[s0, s1] -> (1, s1, s0)>>
  }
}

// -----

// A slice two positions back from the end of a `?` dim that can be 1 long would read before it.
module attributes {novella.symbols = {s0 = ["T", 1, 1024]}} {
  func.func @before_the_start(%x: tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>> {novella.dram = affine_map<()[s0] -> (0)>}) -> tensor<2x2x8xf32> {
    // expected-error @+1 {{'novella.slice' op slice from s0 - 2 starts before the dim for some lengths}}
    %0 = "novella.slice"(%x) {dim = 1 : i64, start = -2 : i64, novella.dram = affine_map<()[s0] -> (s0 * 16)>, novella.sram_budget = {acc = 65536 : i64, spad = 65536 : i64}} : (tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x2x8xf32>
    return %0 : tensor<2x2x8xf32>
  }
}
