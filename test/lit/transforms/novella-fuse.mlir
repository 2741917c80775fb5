// RUN: novella-opt %s --novella-fuse --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-fuse=fuse-prenorm=0 --split-input-file | FileCheck %s --check-prefix=OFF

// A pre-norm: layer_norm(x) feeds only a linear (64 -> 160, T symbolic). The cost model predicts
// fewer cycles with the norm in the linear's prologue: one novella.fused_linear with norm_input
// reads x, keeps the linear's DRAM offset and SRAM budget, and the normalized rows never go to DRAM.
// CHECK-LABEL: func.func @prenorm
// CHECK-NOT: novella.layer_norm
// CHECK: "novella.fused_linear"(%arg0, %{{.*}}, %{{.*}}, %[[W:.*]], %[[B:.*]]) {act = "none", norm_eps = 9.99999974E-6 : f32, norm_input = true, novella.dram = #{{.*}}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 1>}
// OFF-LABEL: func.func @prenorm
// OFF: novella.layer_norm
// OFF: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @prenorm(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (10528)>}) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 288 + 10528)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (64)>} : () -> tensor<64xf32>
    %2 = "novella.layer_norm"(%arg0, %0, %1) {eps = 9.99999974E-6 : f32, novella.dram = affine_map<()[s0] -> (s0 * 64 + 10528)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.weight"() {name = "1.weight", novella.dram = affine_map<()[s0] -> (128)>} : () -> tensor<160x64xf32>
    %4 = "novella.weight"() {name = "1.bias", novella.dram = affine_map<()[s0] -> (10368)>} : () -> tensor<160xf32>
    %5 = "novella.linear"(%2, %3, %4) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 10528)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<160x64xf32>, tensor<160xf32>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    return %5 : tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
  }
}

// -----

// The same, but the norm's input h (a relu's result) was the norm's last read when DRAM was placed,
// and the linear's result took h's block (offset s0 * 64 + 10528): the linear could not read h
// there, so the norm stays.
// CHECK-LABEL: func.func @input_overwritten
// CHECK: novella.layer_norm
// CHECK: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @input_overwritten(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (10528)>}) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 192 + 10528)>} {
    %0 = "novella.weight"() {name = "0.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<64xf32>
    %1 = "novella.weight"() {name = "0.bias", novella.dram = affine_map<()[s0] -> (64)>} : () -> tensor<64xf32>
    %h = "novella.relu"(%arg0) {novella.dram = affine_map<()[s0] -> (s0 * 64 + 10528)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %2 = "novella.layer_norm"(%h, %0, %1) {eps = 9.99999974E-6 : f32, novella.dram = affine_map<()[s0] -> (s0 * 128 + 10528)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.weight"() {name = "1.weight", novella.dram = affine_map<()[s0] -> (128)>} : () -> tensor<64x64xf32>
    %4 = "novella.weight"() {name = "1.bias", novella.dram = affine_map<()[s0] -> (4224)>} : () -> tensor<64xf32>
    %5 = "novella.linear"(%2, %3, %4) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 64 + 10528)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %5 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// Whisper-tiny's attention input: layer_norm(x) feeds q, k and v (384 -> 384), tiles planned for
// T = 64 (a shape bucket's plan). Each linear would normalize the rows again, on the vector unit
// before its first MATMUL: the cost model predicts more cycles than the norm kernel's, so it stays.
// CHECK-LABEL: func.func @three_linears
// CHECK: novella.layer_norm
// CHECK-COUNT-3: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 64]}, novella.plan_lengths = [64]} {
  func.func @three_linears(%arg0: tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>> {novella.dram = affine_map<()[s0] -> (444672)>}) -> (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 1920 + 444672)>} {
    %0 = "novella.weight"() {name = "ln.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<384xf32>
    %1 = "novella.weight"() {name = "ln.bias", novella.dram = affine_map<()[s0] -> (384)>} : () -> tensor<384xf32>
    %w = "novella.weight"() {name = "w", novella.dram = affine_map<()[s0] -> (768)>} : () -> tensor<384x384xf32>
    %b = "novella.weight"() {name = "b", novella.dram = affine_map<()[s0] -> (148224)>} : () -> tensor<384xf32>
    %2 = "novella.layer_norm"(%arg0, %0, %1) {eps = 9.99999974E-6 : f32, novella.dram = affine_map<()[s0] -> (s0 * 384 + 444672)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<384xf32>, tensor<384xf32>) -> tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
    %3 = "novella.linear"(%2, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 768 + 444672)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<384x384xf32>, tensor<384xf32>) -> tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
    %4 = "novella.linear"(%2, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 1152 + 444672)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<384x384xf32>, tensor<384xf32>) -> tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
    %5 = "novella.linear"(%2, %w, %b) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 1536 + 444672)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<384x384xf32>, tensor<384xf32>) -> tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
    return %3, %4, %5 : tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>, tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>
  }
}
