// RUN: novella-opt %s --novella-fuse --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-fuse=fuse-prenorm=0 --split-input-file | FileCheck %s --check-prefix=OFF
// RUN: novella-opt %s --novella-fuse=fuse-gated=0 --split-input-file | FileCheck %s --check-prefix=GOFF

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

// -----

// LLaMA's attention input in a batched decode step: rms_norm(x) (rows of 128, tiles planned for 32
// rows) feeds q, k and v (128 -> 128, 64, 64, no bias: zero splats). An RMSNorm's prologue scales the
// rows by the norm's weight before the MATMULs and each output row by its rsqrt(mean(x * x) + eps) in
// the epilogue, computed on the vector unit beside them: the cost model predicts fewer cycles than the
// norm's kernel, so each linear becomes a novella.fused_linear with norm_input and no norm_bias.
// CHECK-LABEL: func.func @rms_three_linears
// CHECK-NOT: novella.rms_norm
// CHECK-COUNT-3: "novella.fused_linear"(%arg0, %{{.*}}, %{{.*}}, %[[NW:.*]]) {act = "none", norm_eps = 9.99999997E-7 : f32, norm_input = true, {{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 0>}
// OFF-LABEL: func.func @rms_three_linears
// OFF: novella.rms_norm
// OFF-COUNT-3: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @rms_three_linears(%arg0: tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>> {novella.dram = affine_map<()[s0] -> (33664)>}) -> (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 512 + 33664)>} {
    %nw = "novella.weight"() {name = "norm.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<128xf32>
    %wq = "novella.weight"() {name = "q.weight", novella.dram = affine_map<()[s0] -> (128)>} : () -> tensor<128x128xf32>
    %bq = "novella.weight"() {name = "zero_bias_q", novella.dram = affine_map<()[s0] -> (16512)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<128xf32>
    %wk = "novella.weight"() {name = "k.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x128xf32>
    %bk = "novella.weight"() {name = "zero_bias_k", novella.dram = affine_map<()[s0] -> (24832)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %wv = "novella.weight"() {name = "v.weight", novella.dram = affine_map<()[s0] -> (24896)>} : () -> tensor<64x128xf32>
    %bv = "novella.weight"() {name = "zero_bias_v", novella.dram = affine_map<()[s0] -> (33088)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %0 = "novella.rms_norm"(%arg0, %nw) {eps = 9.99999997E-7 : f32, novella.dram = affine_map<()[s0] -> (s0 * 128 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %1 = "novella.linear"(%0, %wq, %bq) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 256 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128x128xf32>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %2 = "novella.linear"(%0, %wk, %bk) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 384 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.linear"(%0, %wv, %bv) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 448 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %1, %2, %3 : tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// The same at one row (tiles planned for T = 1, a single sequence's decode step): each linear's two
// extra VECs and the epilogue's row scale cost more, together, than the norm's kernel, so it stays.
// CHECK-LABEL: func.func @rms_one_row
// CHECK: novella.rms_norm
// CHECK-COUNT-3: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [1]} {
  func.func @rms_one_row(%arg0: tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>> {novella.dram = affine_map<()[s0] -> (33664)>}) -> (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 512 + 33664)>} {
    %nw = "novella.weight"() {name = "norm.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<128xf32>
    %wq = "novella.weight"() {name = "q.weight", novella.dram = affine_map<()[s0] -> (128)>} : () -> tensor<128x128xf32>
    %bq = "novella.weight"() {name = "zero_bias_q", novella.dram = affine_map<()[s0] -> (16512)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<128xf32>
    %wk = "novella.weight"() {name = "k.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x128xf32>
    %bk = "novella.weight"() {name = "zero_bias_k", novella.dram = affine_map<()[s0] -> (24832)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %wv = "novella.weight"() {name = "v.weight", novella.dram = affine_map<()[s0] -> (24896)>} : () -> tensor<64x128xf32>
    %bv = "novella.weight"() {name = "zero_bias_v", novella.dram = affine_map<()[s0] -> (33088)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %0 = "novella.rms_norm"(%arg0, %nw) {eps = 9.99999997E-7 : f32, novella.dram = affine_map<()[s0] -> (s0 * 128 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %1 = "novella.linear"(%0, %wq, %bq) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 256 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128x128xf32>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %2 = "novella.linear"(%0, %wk, %bk) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 384 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.linear"(%0, %wv, %bv) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 448 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %1, %2, %3 : tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// SwiGLU (T symbolic, tiles planned for 64 rows): silu(gate) * up as a generic (torch-mlir's sigmoid
// body) of two linears' results. The up linear takes the product as its epilogue: a fused_linear with
// act "swiglu" and the gate as its residual operand, in the generic's place with its DRAM offset and the
// up linear's SRAM budget; the cost model predicts fewer cycles than the linear plus the generic kernel.
// CHECK-LABEL: func.func @swiglu
// CHECK: %[[G:.*]] = "novella.linear"(%arg0
// CHECK-NOT: novella.generic
// CHECK: "novella.fused_linear"(%arg0, %{{.*}}, %{{.*}}, %[[G]]) {act = "swiglu", norm_eps = {{.*}}, norm_input = false, novella.dram = #{{.*}}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0>}
// GOFF-LABEL: func.func @swiglu
// GOFF-COUNT-2: "novella.linear"
// GOFF: novella.generic
module attributes {novella.symbols = {s0 = ["T", 1, 64]}, novella.plan_lengths = [64]} {
  func.func @swiglu(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (31104)>}) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 31104)>} {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = "novella.weight"() {name = "gate.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<160x64xf32>
    %1 = "novella.weight"() {name = "zero_bias_3", novella.dram = affine_map<()[s0] -> (10240)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<160xf32>
    %2 = "novella.linear"(%arg0, %0, %1) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 64 + 31104)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<160x64xf32>, tensor<160xf32>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    %3 = "novella.weight"() {name = "up.weight", novella.dram = affine_map<()[s0] -> (10400)>} : () -> tensor<160x64xf32>
    %4 = "novella.weight"() {name = "zero_bias_4", novella.dram = affine_map<()[s0] -> (20640)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<160xf32>
    %5 = "novella.linear"(%arg0, %3, %4) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 224 + 31104)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<160x64xf32>, tensor<160xf32>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    %6 = "novella.generic"(%5, %2) ({
    ^bb0(%arg1: f32, %arg2: f32):
      %10 = arith.negf %arg2 : f32
      %11 = math.exp %10 : f32
      %12 = arith.addf %11, %cst : f32
      %13 = arith.divf %cst, %12 : f32
      %14 = arith.mulf %arg2, %13 : f32
      %15 = arith.mulf %14, %arg1 : f32
      "novella.yield"(%15) : (f32) -> ()
    }) {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], novella.dram = affine_map<()[s0] -> (s0 * 224 + 31104)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0>} : (tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>, tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    return %6 : tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
  }
}

// -----

// The same, but the generic's result took x's block (offset 31104: x's last reader was the up linear
// when DRAM was placed). The up linear in the generic's place would overwrite x while it still reads
// it, so the generic stays.
// CHECK-LABEL: func.func @swiglu_over_input
// CHECK-COUNT-2: "novella.linear"
// CHECK: novella.generic
module attributes {novella.symbols = {s0 = ["T", 1, 64]}, novella.plan_lengths = [64]} {
  func.func @swiglu_over_input(%arg0: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {novella.dram = affine_map<()[s0] -> (31104)>}) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>> attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 384 + 31104)>} {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = "novella.weight"() {name = "gate.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<160x64xf32>
    %1 = "novella.weight"() {name = "zero_bias_3", novella.dram = affine_map<()[s0] -> (10240)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<160xf32>
    %2 = "novella.linear"(%arg0, %0, %1) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 64 + 31104)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<160x64xf32>, tensor<160xf32>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    %3 = "novella.weight"() {name = "up.weight", novella.dram = affine_map<()[s0] -> (10400)>} : () -> tensor<160x64xf32>
    %4 = "novella.weight"() {name = "zero_bias_4", novella.dram = affine_map<()[s0] -> (20640)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<160xf32>
    %5 = "novella.linear"(%arg0, %3, %4) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 224 + 31104)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<160x64xf32>, tensor<160xf32>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    %6 = "novella.generic"(%5, %2) ({
    ^bb0(%arg1: f32, %arg2: f32):
      %10 = arith.negf %arg2 : f32
      %11 = math.exp %10 : f32
      %12 = arith.addf %11, %cst : f32
      %13 = arith.divf %cst, %12 : f32
      %14 = arith.mulf %arg2, %13 : f32
      %15 = arith.mulf %14, %arg1 : f32
      "novella.yield"(%15) : (f32) -> ()
    }) {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], novella.dram = affine_map<()[s0] -> (31104)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}, operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0>} : (tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>, tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>) -> tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
    return %6 : tensor<1x?x160xf32, affine_map<()[s0] -> (1, s0, 160)>>
  }
}

// -----

// The norm's weight is computed at run time (here a relu of the parameter; Gemma's 1 + w), and q's result
// took its block once the norm had read it: k and v would read the weight after q overwrote it, so the
// norm stays.
// CHECK-LABEL: func.func @rms_weight_overwritten
// CHECK: novella.rms_norm
// CHECK-COUNT-3: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @rms_weight_overwritten(%arg0: tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>> {novella.dram = affine_map<()[s0] -> (33664)>}) -> (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 640 + 33664)>} {
    %nw = "novella.weight"() {name = "norm.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<128xf32>
    %wq = "novella.weight"() {name = "q.weight", novella.dram = affine_map<()[s0] -> (128)>} : () -> tensor<128x128xf32>
    %bq = "novella.weight"() {name = "zero_bias_q", novella.dram = affine_map<()[s0] -> (16512)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<128xf32>
    %wk = "novella.weight"() {name = "k.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x128xf32>
    %bk = "novella.weight"() {name = "zero_bias_k", novella.dram = affine_map<()[s0] -> (24832)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %wv = "novella.weight"() {name = "v.weight", novella.dram = affine_map<()[s0] -> (24896)>} : () -> tensor<64x128xf32>
    %bv = "novella.weight"() {name = "zero_bias_v", novella.dram = affine_map<()[s0] -> (33088)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %nwc = "novella.relu"(%nw) {novella.dram = affine_map<()[s0] -> (s0 * 512 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<128xf32>) -> tensor<128xf32>
    %0 = "novella.rms_norm"(%arg0, %nwc) {eps = 9.99999997E-7 : f32, novella.dram = affine_map<()[s0] -> (s0 * 128 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %1 = "novella.linear"(%0, %wq, %bq) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 512 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128x128xf32>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %2 = "novella.linear"(%0, %wk, %bk) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 384 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.linear"(%0, %wv, %bv) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 448 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %1, %2, %3 : tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// k's result block (offset 128 * T + 33536, [T, 64]) differs from x's (33664, [T, 128]) as an expression
// but overlaps it at every T (at T = 1 it is x's row): k would overwrite x before v reads it, so the norm
// stays (the blocks are compared over the symbol box, not by their offsets' equality).
// CHECK-LABEL: func.func @rms_input_met_at_one
// CHECK: novella.rms_norm
// CHECK-COUNT-3: "novella.linear"
module attributes {novella.symbols = {s0 = ["T", 1, 32]}, novella.plan_lengths = [32]} {
  func.func @rms_input_met_at_one(%arg0: tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>> {novella.dram = affine_map<()[s0] -> (33664)>}) -> (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) attributes {novella.dram_size = affine_map<()[s0] -> (s0 * 512 + 33664)>} {
    %nw = "novella.weight"() {name = "norm.weight", novella.dram = affine_map<()[s0] -> (0)>} : () -> tensor<128xf32>
    %wq = "novella.weight"() {name = "q.weight", novella.dram = affine_map<()[s0] -> (128)>} : () -> tensor<128x128xf32>
    %bq = "novella.weight"() {name = "zero_bias_q", novella.dram = affine_map<()[s0] -> (16512)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<128xf32>
    %wk = "novella.weight"() {name = "k.weight", novella.dram = affine_map<()[s0] -> (16640)>} : () -> tensor<64x128xf32>
    %bk = "novella.weight"() {name = "zero_bias_k", novella.dram = affine_map<()[s0] -> (24832)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %wv = "novella.weight"() {name = "v.weight", novella.dram = affine_map<()[s0] -> (24896)>} : () -> tensor<64x128xf32>
    %bv = "novella.weight"() {name = "zero_bias_v", novella.dram = affine_map<()[s0] -> (33088)>, novella.splat = 0.000000e+00 : f64} : () -> tensor<64xf32>
    %0 = "novella.rms_norm"(%arg0, %nw) {eps = 9.99999997E-7 : f32, novella.dram = affine_map<()[s0] -> (s0 * 128 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %1 = "novella.linear"(%0, %wq, %bq) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 256 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<128x128xf32>, tensor<128xf32>) -> tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>
    %2 = "novella.linear"(%0, %wk, %bk) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 128 + 33536)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %3 = "novella.linear"(%0, %wv, %bv) {act = "none", novella.dram = affine_map<()[s0] -> (s0 * 448 + 33664)>, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<64x128xf32>, tensor<64xf32>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %1, %2, %3 : tensor<1x?x128xf32, affine_map<()[s0] -> (1, s0, 128)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}
