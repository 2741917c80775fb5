// RUN: novella-opt %s --novella-fuse --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-fuse=fuse-mlp=0 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: novella-opt %s --novella-fuse --novella-tile --split-input-file | FileCheck %s --check-prefix=TILE

// An MLP 64 -> 256 (gelu) -> 64 (relu), T symbolic, tiles planned for T = 16 (a shape bucket's plan): the
// cost model predicts fewer cycles for one novella.fused_mlp, whose hidden rows [T, 256] stay in the
// scratchpad chunk by chunk (the weights are read once: the rows fit one row block). It takes the second
// linear's DRAM offset and SRAM budget; tile decides the row block tm, the hidden chunk hc, the grid
// (row blocks, chunks) and the buffers (w1 and w2 chunks streamed in two slots, the hidden in two halves).
// CHECK-LABEL: func.func @mlp
// CHECK: %[[W1:.*]] = "novella.weight"() {name = "0.weight"
// CHECK: %[[B1:.*]] = "novella.weight"() {name = "0.bias"
// CHECK: %[[W2:.*]] = "novella.weight"() {name = "2.weight"
// CHECK: %[[B2:.*]] = "novella.weight"() {name = "2.bias"
// CHECK-NOT: "novella.linear"
// CHECK: %[[Y:.*]] = "novella.fused_mlp"(%arg0, %[[W1]], %[[B1]], %[[W2]], %[[B2]]) {act = "relu", act1 = "gelu", novella.dram = #{{.*}}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0>}
// CHECK: return %[[Y]]
// OFF-LABEL: func.func @mlp
// OFF-COUNT-2: "novella.linear"
// OFF-NOT: novella.fused_mlp
// TILE: #[[GRID:map[0-9]*]] = affine_map<()[s0] -> (s0 ceildiv 16, 16)>
// TILE-LABEL: func.func @mlp
// TILE: "novella.fused_mlp"
// TILE-SAME: h = ["spad", {{[0-9]+}}, 512]
// TILE-SAME: w1 = ["spad", {{[0-9]+}}, 1024, 2]
// TILE-SAME: w2 = ["spad", {{[0-9]+}}, 1024, 2]
// TILE-SAME: novella.grid = #[[GRID]]
// TILE-SAME: novella.tiles = {hc = 16 : i64, tm = 16 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 300]}, novella.plan_lengths = [16]} {
  func.func @mlp(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (33088)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 33088)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<256x64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<256xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x256xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (33024)>} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
    %5 = "novella.linear"(%4, %2, %3) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 320 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The same MLP planned for the nominal length (T = 4096): a fused kernel would read the weights once per
// row block, so the two linears stay.
// CHECK-LABEL: func.func @mlp_long
// CHECK-COUNT-2: "novella.linear"
// CHECK-NOT: novella.fused_mlp
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @mlp_long(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (33088)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 33088)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<256x64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<256xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x256xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (33024)>} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
    %5 = "novella.linear"(%4, %2, %3) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 320 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The second linear adds a residual (x): the fused kernel adds it on the output block, the residual its
// sixth operand.
// CHECK-LABEL: func.func @mlp_residual
// CHECK: "novella.fused_mlp"(%arg0, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %arg0) {act = "none", act1 = "gelu"
// CHECK-SAME: operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>
module attributes {novella.symbols = {s0 = ["T", 1, 300]}, novella.plan_lengths = [16]} {
  func.func @mlp_residual(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (33088)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 33088)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<256x64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<256xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x256xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (33024)>} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
    %5 = "novella.fused_linear"(%4, %2, %3, %arg0) {act = "none", norm_eps = 9.99999974E-6 : f32, norm_input = false, novella.dram = affine_map<()[s0] -> (s0 * 320 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>} : (tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>, tensor<64x256xf32>, tensor<64xf32>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The hidden rows are also a result of the function: they must go to DRAM, the linears stay.
// CHECK-LABEL: func.func @hidden_used
// CHECK-COUNT-2: "novella.linear"
// CHECK-NOT: novella.fused_mlp
module attributes {novella.symbols = {s0 = ["T", 1, 300]}, novella.plan_lengths = [16]} {
  func.func @hidden_used(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (33088)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 33088)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<256x64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<256xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x256xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (33024)>} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
    %5 = "novella.linear"(%4, %2, %3) {act = "relu", novella.dram = affine_map<()[s0] -> (s0 * 320 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5, %4 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
  }
}

// -----

// The result took x's DRAM block (x's last reader was the first linear) and T reaches 300, past one row
// block: a later row block's x rows would be read after an earlier block's STORE over them. The linears stay.
// CHECK-LABEL: func.func @x_overwritten
// CHECK-COUNT-2: "novella.linear"
// CHECK-NOT: novella.fused_mlp
module attributes {novella.symbols = {s0 = ["T", 1, 300]}, novella.plan_lengths = [16]} {
  func.func @x_overwritten(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (33088)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 320 + 33088)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<256x64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<256xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x256xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (33024)>} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
    %5 = "novella.linear"(%4, %2, %3) {act = "relu", novella.dram = affine_map<()[s0] -> (33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The same, but T is at most 16 (a shape bucket's program): x fits one row block, LOADed whole on the
// kernel's first step before any STORE, so the result may take its block: fused.
// CHECK: #[[X:map[0-9]*]] = affine_map<()[s0] -> (33088)>
// CHECK-LABEL: func.func @x_overwritten_one_block
// CHECK-SAME: {novella.dram = #[[X]]}
// CHECK: %[[Y:.*]] = "novella.fused_mlp"(%arg0,
// CHECK-SAME: novella.dram = #[[X]]
// CHECK: return %[[Y]]
module attributes {novella.symbols = {s0 = ["T", 1, 16]}, novella.plan_lengths = [16]} {
  func.func @x_overwritten_one_block(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (33088)>}) -> (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 320 + 33088)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<256x64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (16384)>} : () -> tensor<256xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x256xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (33024)>} : () -> tensor<64xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 64 + 33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>
    %5 = "novella.linear"(%4, %2, %3) {act = "relu", novella.dram = affine_map<()[s0] -> (33088)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x256xf32, affine_map<()[s0] -> (1, s0, 256)>>, tensor<64x256xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// Whisper's MLP 384 -> 1536 -> 384 (+ x) planned for T = 64 on the default budget: the output block [64, 384]
// is more than the accumulator, so the cost model takes the split form (`pn`): the block summed in the
// scratchpad (`ysum`), the products by w2 through the accumulator in pieces of pn columns (`accp`, two
// halves), the weights one tile a grid step through one two-slot buffer `w` (grid: row blocks, 2 * 96 + 1
// steps), b1 and b2 in the accumulator.
// CHECK-LABEL: func.func @mlp_split
// CHECK: "novella.fused_mlp"(%arg0, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %arg0) {act = "none", act1 = "gelu"
// TILE: #[[SGRID:map[0-9]*]] = affine_map<()[s0] -> (s0 ceildiv 64, 193)>
// TILE-LABEL: func.func @mlp_split
// TILE: "novella.fused_mlp"
// TILE-SAME: accp = ["acc", {{[0-9]+}}, 12288]
// TILE-SAME: b1 = ["acc", {{[0-9]+}}, 1536]
// TILE-SAME: w = ["spad", {{[0-9]+}}, 6144, 2]
// TILE-SAME: ysum = ["spad", {{[0-9]+}}, 24576]
// TILE-SAME: novella.grid = #[[SGRID]]
// TILE-SAME: novella.tiles = {hc = 16 : i64, pn = 96 : i64, tm = 64 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 64]}, novella.plan_lengths = [64]} {
  func.func @mlp_split(%arg0: tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>> {novella.dram = affine_map<()[s0] -> (1181568)>}) -> (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 2304 + 1181568)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<1536x384xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (589824)>} : () -> tensor<1536xf32>
    %2 = "novella.weight"() {name = "2.weight", novella.dram = affine_map<()[s0] -> (591360)>} : () -> tensor<384x1536xf32>
    %3 = "novella.weight"() {name = "2.bias", novella.dram = affine_map<()[s0] -> (1181184)>} : () -> tensor<384xf32>
    %4 = "novella.linear"(%arg0, %0, %1) {act = "gelu", novella.dram = affine_map<()[s0] -> (s0 * 384 + 1181568)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<1536x384xf32>, tensor<1536xf32>) -> tensor<1x?x1536xf32, affine_map<()[s0] -> (1, s0, 1536)>>
    %5 = "novella.fused_linear"(%4, %2, %3, %arg0) {act = "none", norm_eps = 9.99999974E-6 : f32, norm_input = false, novella.dram = affine_map<()[s0] -> (s0 * 1920 + 1181568)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>} : (tensor<1x?x1536xf32, affine_map<()[s0] -> (1, s0, 1536)>>, tensor<384x1536xf32>, tensor<384xf32>, tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>) -> tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
    return %5 : tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
  }
}
