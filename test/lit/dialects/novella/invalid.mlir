// RUN: novella-opt %s --split-input-file --verify-diagnostics

func.func @linear_k_mismatch(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32x48xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
  // expected-error @+1 {{'novella.linear' op input inner dim must be 48 (weight is 32x48), got tensor<4x64xf32>}}
  %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<4x64xf32>, tensor<32x48xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @linear_bad_activation(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
  %0 = "novella.linear"(%x, %w, %b) {act = "swish"} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>
  // expected-error @above {{unknown activation 'swish' (expected none, relu or gelu)}}
  return %0 : tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>
}

// -----

func.func @linear_bias_size(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<16xf32>
  // expected-error @below {{result must be [..., 32] with bias [32]}}
  %0 = "novella.linear"(%x, %w, %b) : (tensor<4x64xf32>, tensor<32x64xf32>, tensor<16xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @linear_f16(%x: tensor<4x64xf16>, %w: tensor<32x64xf16>, %b: tensor<32xf16>) -> tensor<4x32xf16> {
  // expected-error @+1 {{'novella.linear' op supports only f32 tensors}}
  %0 = "novella.linear"(%x, %w, %b) : (tensor<4x64xf16>, tensor<32x64xf16>, tensor<32xf16>) -> tensor<4x32xf16>
  return %0 : tensor<4x32xf16>
}

// -----

func.func @matmul_contraction(%a: tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, %b: tensor<2x32x16xf32>) -> tensor<2x?x16xf32, affine_map<()[s0] -> (2, s0, 16)>> {
  // expected-error @+1 {{'novella.matmul' op contraction dims differ}}
  %0 = "novella.matmul"(%a, %b) : (tensor<2x?x64xf32, affine_map<()[s0] -> (2, s0, 64)>>, tensor<2x32x16xf32>) -> tensor<2x?x16xf32, affine_map<()[s0] -> (2, s0, 16)>>
  return %0 : tensor<2x?x16xf32, affine_map<()[s0] -> (2, s0, 16)>>
}

// -----

func.func @matmul_transposed_contraction(%a: tensor<?x64xf32>, %b: tensor<64x16xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{contraction dims differ: tensor<?x64xf32> @ tensor<64x16xf32>}}
  %0 = "novella.matmul"(%a, %b) {transpose_rhs = true} : (tensor<?x64xf32>, tensor<64x16xf32>) -> tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// -----

func.func @matmul_rank(%a: tensor<64xf32>, %b: tensor<64x16xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{of equal rank >= 2}}
  %0 = "novella.matmul"(%a, %b) : (tensor<64xf32>, tensor<64x16xf32>) -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

func.func @add_no_broadcast(%a: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %b: tensor<3x32xf32>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>> {
  // expected-error-re @+1 {{'novella.add' op operands tensor<?x64xf32, {{.*}}> and tensor<3x32xf32> do not broadcast}}
  %0 = "novella.add"(%a, %b) : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<3x32xf32>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  return %0 : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
}

// -----

func.func @mul_result_shape(%a: tensor<4x64xf32>, %b: tensor<64xf32>) -> tensor<4x32xf32> {
  // expected-error @+1 {{'novella.mul' op operands tensor<4x64xf32> and tensor<64xf32> do not broadcast to tensor<4x32xf32>}}
  %0 = "novella.mul"(%a, %b) : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @weight_dynamic() -> tensor<?x64xf32> {
  // expected-error @+1 {{'novella.weight' op weight must have a static shape, got tensor<?x64xf32>}}
  %w = "novella.weight"() {name = "w"} : () -> tensor<?x64xf32>
  return %w : tensor<?x64xf32>
}

// -----

func.func @relu_shape(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  // expected-error @+1 {{'novella.relu' op result tensor<4x32xf32> must have the operand's shape tensor<4x64xf32>}}
  %0 = "novella.relu"(%x) : (tensor<4x64xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @layer_norm_weight(%x: tensor<?x64xf32>, %w: tensor<32xf32>, %b: tensor<64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{'novella.layer_norm' op needs a static last dim matching weight/bias}}
  %0 = "novella.layer_norm"(%x, %w, %b) {eps = 1.0e-05 : f32} : (tensor<?x64xf32>, tensor<32xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return %0 : tensor<?x64xf32>
}

// -----

func.func @transpose_perm(%x: tensor<2x?x64xf32>) -> tensor<2x64x?xf32> {
  // expected-error @+1 {{'novella.transpose' op perm [0, 2, 2] is not a permutation of rank 3}}
  %0 = "novella.transpose"(%x) {perm = array<i64: 0, 2, 2>} : (tensor<2x?x64xf32>) -> tensor<2x64x?xf32>
  return %0 : tensor<2x64x?xf32>
}

// -----

func.func @transpose_result(%x: tensor<2x?x64xf32>) -> tensor<2x32x?xf32> {
  // expected-error @+1 {{result tensor<2x32x?xf32> is not tensor<2x?x64xf32> permuted by [0, 2, 1]}}
  %0 = "novella.transpose"(%x) {perm = array<i64: 0, 2, 1>} : (tensor<2x?x64xf32>) -> tensor<2x32x?xf32>
  return %0 : tensor<2x32x?xf32>
}

// -----

func.func @linear_two_operands(%x: tensor<4x64xf32>, %w: tensor<32x64xf32>) -> tensor<4x32xf32> {
  // expected-error @+1 {{'novella.linear' op expects 3 operand(s), got 2}}
  %0 = "novella.linear"(%x, %w) {act = "none"} : (tensor<4x64xf32>, tensor<32x64xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @linear_integer_act(%x: tensor<4x64xf32>, %w: tensor<32x64xf32>, %b: tensor<32xf32>) -> tensor<4x32xf32> {
  // expected-error @+1 {{'novella.linear' op attribute 'act' must be a string attribute, got 3 : i64}}
  %0 = "novella.linear"(%x, %w, %b) {act = 3 : i64} : (tensor<4x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @relu_unranked(%x: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error @+1 {{'novella.relu' op expects ranked tensors, got tensor<*xf32>}}
  %0 = "novella.relu"(%x) : (tensor<*xf32>) -> tensor<*xf32>
  return %0 : tensor<*xf32>
}

// -----

func.func @linear_zero_inner_dim(%x: tensor<4x0xf32>, %w: tensor<32x0xf32>, %b: tensor<32xf32>) -> tensor<4x32xf32> {
  // expected-error @+1 {{'novella.linear' op does not support zero-size dims, got tensor<4x0xf32>}}
  %0 = "novella.linear"(%x, %w, %b) : (tensor<4x0xf32>, tensor<32x0xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

func.func @slice_string_dim(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'novella.slice' op attribute 'dim' must be a integer attribute, got "a"}}
  %0 = "novella.slice"(%x) {dim = "a", start = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

func.func @slice_negative_start_of_a_static_dim(%x: tensor<4x8xf32>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'novella.slice' op a negative start -2 (from the end) needs a `?` dim 1 and at most 2 rows}}
  %0 = "novella.slice"(%x) {dim = 1 : i64, start = -2 : i64} : (tensor<4x8xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}

// -----

func.func @scalar_unknown_fn(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'novella.scalar' op unknown fn 'pow' (expected one of add, sub, mul, div, rsub, max, min, lt, le, gt, ge, eq, ne)}}
  %0 = "novella.scalar"(%x) {fn = "pow", value = 2.0 : f32} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Attributes declared with a default may be omitted: transpose_rhs = false.
func.func @matmul_default_transpose(%a: tensor<4x8xf32>, %b: tensor<16x8xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'novella.matmul' op contraction dims differ}}
  %0 = "novella.matmul"(%a, %b) : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

func.func @flip_dim_out_of_range(%x: tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>> {
  // expected-error @+1 {{'novella.flip' op dim 3 is out of range for tensor<2x?x8xf32}}
  %0 = "novella.flip"(%x) {dim = 3 : i64} : (tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>
  return %0 : tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>
}

// -----

func.func @scan_bad_fn(%x: tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>>) -> tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>> {
  // expected-error @+1 {{unknown scan 'max' (expected one of sum, prod)}}
  %0 = "novella.scan"(%x) {dim = 0 : i64, fn = "max"} : (tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>>) -> tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>>
  return %0 : tensor<?x8xf32, affine_map<()[s0] -> (s0, 8)>>
}

// -----

func.func @scan_bad_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{dim 2 is out of range for tensor<4x8xf32>}}
  %0 = "novella.scan"(%x) {dim = 2 : i64, fn = "sum"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// A map that permutes is not an access pattern the kernel has (the frontend transposes first).
#perm = affine_map<(d0, d1) -> (d1, d0)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @permuted(%x: tensor<64x?xf32, affine_map<()[s0] -> (64, s0)>>) -> tensor<?x64xf32> {
    // expected-error @+1 {{'novella.generic' op map (d0, d1) -> (d1, d0) does not read}}
    %0 = "novella.generic"(%x) ({
    ^bb0(%a: f32):
      "novella.yield"(%a) : (f32) -> ()
    }) {indexing_maps = [#perm], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0>} : (tensor<64x?xf32, affine_map<()[s0] -> (64, s0)>>) -> tensor<?x64xf32>
    return %0 : tensor<?x64xf32>
  }
}

// -----

// "swiglu" multiplies by silu of the residual operand: a linear without one cannot take it.
func.func @linear_swiglu_without_gate(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
  // expected-error @+1 {{unknown activation 'swiglu' (expected none, relu or gelu)}}
  %0 = "novella.fused_linear"(%x, %w, %b) {act = "swiglu", norm_eps = 1.0E-5 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>} : (tensor<4x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

// A norm without norm_bias is an RMSNorm, which a fused linear takes as its prologue only.
func.func @rms_norm_on_output(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
  %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
  %nw = "novella.weight"() {name = "nw"} : () -> tensor<32xf32>
  // expected-error @+1 {{a norm without norm_bias (an RMSNorm) is a prologue only: it needs norm_input = true}}
  %0 = "novella.fused_linear"(%x, %w, %b, %nw) {act = "none", norm_eps = 1.0E-5 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 0, 1, 0>} : (tensor<4x64xf32>, tensor<32x64xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}
