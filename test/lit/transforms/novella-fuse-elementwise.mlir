// RUN: novella-opt %s --novella-fuse-elementwise --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-fuse-elementwise=fuse-elementwise=0 --split-input-file | FileCheck %s --check-prefix=OFF

// SwiGLU, T symbolic: silu(gate) as a generic (torch-mlir's sigmoid body), times gate, times up. Each
// producer's only use is the next op, over the same [1, T, 64] space: one generic reads gate and up
// and computes the chain in its body; the sigmoid and the product never go to DRAM.
// CHECK-LABEL: func.func @swiglu
// CHECK-SAME: (%[[G:.*]]: tensor<1x?x64xf32, {{.*}}>, %[[U:.*]]: tensor<1x?x64xf32
// CHECK: %[[F:.*]] = "novella.generic"(%[[U]], %[[G]]) ({
// CHECK-NEXT: ^bb0(%[[A0:.*]]: f32, %[[A1:.*]]: f32):
// CHECK-NEXT: %[[N:.*]] = arith.negf %[[A1]]
// CHECK-NEXT: %[[E:.*]] = math.exp %[[N]]
// CHECK-NEXT: %[[D:.*]] = arith.addf %[[E]], %[[ONE:.*]] : f32
// CHECK-NEXT: %[[S:.*]] = arith.divf %[[ONE]], %[[D]]
// CHECK-NEXT: %[[GS:.*]] = arith.mulf %[[A1]], %[[S]]
// CHECK-NEXT: %[[Y:.*]] = arith.mulf %[[GS]], %[[A0]]
// CHECK-NEXT: "novella.yield"(%[[Y]])
// CHECK-NOT: novella.mul
// CHECK: return %[[F]]
// OFF-LABEL: func.func @swiglu
// OFF: novella.generic
// OFF-COUNT-2: novella.mul
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @swiglu(%g: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, %u: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {
    %cst = arith.constant 1.000000e+00 : f32
    %0 = "novella.generic"(%g) ({
    ^bb0(%a: f32):
      %n = arith.negf %a : f32
      %e = math.exp %n : f32
      %d = arith.addf %e, %cst : f32
      %s = arith.divf %cst, %d : f32
      "novella.yield"(%s) : (f32) -> ()
    }) {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0>} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %1 = "novella.mul"(%g, %0) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %2 = "novella.mul"(%1, %u) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %2 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// RMSNorm's tail, T symbolic: rsqrt(ms + eps) of each row's mean square [1, T, 1], times x, times the
// weight [64]. The row's value is broadcast over the columns; at the planned length the cost model
// predicts a gain from recomputing it per element over a separate [T, 1] kernel, so the three ops merge
// into one generic that reads the weight as a [1, 1, 64] view (map (d0, 0, d2)) and ms at (d0, d1, 0).
// CHECK-LABEL: func.func @rms_tail
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32, {{.*}}>, %[[MS:.*]]: tensor<1x?x1xf32
// CHECK: %[[W:.*]] = "novella.weight"
// CHECK: %[[W3:.*]] = "novella.reshape"(%[[W]]) : (tensor<64xf32>) -> tensor<1x1x64xf32>
// CHECK: "novella.generic"(%[[W3]], %[[X]], %[[MS]]) ({
// CHECK: arith.addf
// CHECK-NEXT: math.rsqrt
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: arith.mulf
// CHECK: indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}]
// CHECK-NOT: novella.math
// OFF-LABEL: func.func @rms_tail
// OFF: novella.scalar
// OFF: novella.math
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @rms_tail(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, %ms: tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {
    %0 = "novella.scalar"(%ms) {fn = "add", value = 9.99999997E-7 : f32} : (tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>
    %1 = "novella.math"(%0) {fn = "rsqrt"} : (tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>
    %2 = "novella.mul"(%x, %1) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %w = "novella.weight"() {name = "w"} : () -> tensor<64xf32>
    %3 = "novella.mul"(%w, %2) : (tensor<64xf32>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %3 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// A producer with a use outside the consumer stays: h = x * x feeds the add and the return, so it must
// be stored anyway (the add still merges nothing: its other operand is an argument).
// CHECK-LABEL: func.func @shared
// CHECK: %[[H:.*]] = "novella.mul"
// CHECK: %[[A:.*]] = "novella.add"(%[[H]], %{{.*}})
// CHECK: return %[[H]], %[[A]]
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @shared(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %y: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) {
    %0 = "novella.mul"(%x, %x) : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
    %1 = "novella.add"(%0, %y) : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
    return %0, %1 : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  }
}

// -----

// The same tail in a batched decode step (32 rows of 128, static): the two ops on the [32, 1, 1] column
// merge, but recomputing rsqrt for each of the 128 columns costs the vector unit more than the column's
// own kernel does (its DMA is 128 B), so the cost model keeps the column apart and the mul reads it.
// CHECK-LABEL: func.func @rms_rows32
// CHECK-SAME: (%[[X:.*]]: tensor<32x1x128xf32>, %[[MS:.*]]: tensor<32x1x1xf32>)
// CHECK: %[[R:.*]] = "novella.generic"(%[[MS]]) ({
// CHECK: math.rsqrt
// CHECK: (tensor<32x1x1xf32>) -> tensor<32x1x1xf32>
// CHECK-NEXT: %[[Y:.*]] = "novella.mul"(%[[X]], %[[R]])
// CHECK-NEXT: return %[[Y]]
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @rms_rows32(%x: tensor<32x1x128xf32>, %ms: tensor<32x1x1xf32>) -> tensor<32x1x128xf32> {
    %0 = "novella.scalar"(%ms) {fn = "add", value = 9.99999997E-7 : f32} : (tensor<32x1x1xf32>) -> tensor<32x1x1xf32>
    %1 = "novella.math"(%0) {fn = "rsqrt"} : (tensor<32x1x1xf32>) -> tensor<32x1x1xf32>
    %2 = "novella.mul"(%x, %1) : (tensor<32x1x128xf32>, tensor<32x1x1xf32>) -> tensor<32x1x128xf32>
    return %2 : tensor<32x1x128xf32>
  }
}

// -----

// RMSNorm, T symbolic (LlamaRMSNorm as the frontend lowers it): the mean of x * x, + eps, rsqrt, times x,
// times the weight [64]. The tail is merged first, then the square, the mean and the tail become one
// rms_norm (eps read from the body), so x is read once and nothing but the result goes to DRAM.
// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32
// CHECK: %[[W:.*]] = "novella.weight"
// CHECK: %[[Y:.*]] = "novella.rms_norm"(%[[X]], %[[W]]) {eps = 9.99999997E-7 : f32} : (tensor<1x?x64xf32, #{{.*}}>, tensor<64xf32>) -> tensor<1x?x64xf32
// CHECK-NOT: novella.reduce
// CHECK-NOT: novella.generic
// CHECK: return %[[Y]]
// OFF-LABEL: func.func @rms_norm
// OFF: novella.reduce
// OFF-NOT: novella.rms_norm
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @rms_norm(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {
    %sq = "novella.mul"(%x, %x) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %ms = "novella.reduce"(%sq) {fn = "mean"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>
    %e = "novella.scalar"(%ms) {fn = "add", value = 9.99999997E-7 : f32} : (tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>
    %r = "novella.math"(%e) {fn = "rsqrt"} : (tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>
    %xr = "novella.mul"(%x, %r) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    %w = "novella.weight"() {name = "w"} : () -> tensor<64xf32>
    %y = "novella.mul"(%w, %xr) : (tensor<64xf32>, tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %y : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// RoPE, T symbolic: q * cos + rotate_half(q) * sin, rotate_half written as cat(-q[..., 8:], q[..., :8]).
// The products and the sum become one generic; then the rotate_half (two slices, a neg, a concat, four
// kernels through DRAM) is read by it in place: its operand is q itself, marked in novella.rotate_half
// (the kernel loads q's halves swapped and negates the first in SRAM). Off, the four ops stay.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x4x?x16xf32, #{{.*}}>, %[[COS:[^:]*]]: tensor<1x1x?x16xf32, #{{.*}}>, %[[SIN:[^:]*]]: tensor
// CHECK-NOT: novella.concat
// CHECK: %[[G:.*]] = "novella.generic"(%[[Q]], %[[COS]], %[[Q]], %[[SIN]])
// CHECK: novella.rotate_half = [2]
// CHECK-NOT: novella.math
// CHECK: return %[[G]]
// OFF-LABEL: func.func @rope
// OFF: %[[N:.*]] = "novella.math"(%{{.*}}) {fn = "neg"}
// OFF: "novella.concat"(%[[N]], %{{.*}}) {dim = 3 : i64}
#map = affine_map<()[s0] -> (1, 4, s0, 16)>
#map1 = affine_map<()[s0] -> (1, 1, s0, 16)>
#map2 = affine_map<()[s0] -> (1, 4, s0, 8)>
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @rope(%arg0: tensor<1x4x?x16xf32, #map>, %arg1: tensor<1x1x?x16xf32, #map1>, %arg2: tensor<1x1x?x16xf32, #map1>) -> tensor<1x4x?x16xf32, #map> {
    %0 = "novella.mul"(%arg0, %arg1) : (tensor<1x4x?x16xf32, #map>, tensor<1x1x?x16xf32, #map1>) -> tensor<1x4x?x16xf32, #map>
    %1 = "novella.slice"(%arg0) {dim = 3 : i64, start = 8 : i64} : (tensor<1x4x?x16xf32, #map>) -> tensor<1x4x?x8xf32, #map2>
    %2 = "novella.math"(%1) {fn = "neg"} : (tensor<1x4x?x8xf32, #map2>) -> tensor<1x4x?x8xf32, #map2>
    %3 = "novella.slice"(%arg0) {dim = 3 : i64, start = 0 : i64} : (tensor<1x4x?x16xf32, #map>) -> tensor<1x4x?x8xf32, #map2>
    %4 = "novella.concat"(%2, %3) {dim = 3 : i64} : (tensor<1x4x?x8xf32, #map2>, tensor<1x4x?x8xf32, #map2>) -> tensor<1x4x?x16xf32, #map>
    %5 = "novella.mul"(%4, %arg2) : (tensor<1x4x?x16xf32, #map>, tensor<1x1x?x16xf32, #map1>) -> tensor<1x4x?x16xf32, #map>
    %6 = "novella.add"(%0, %5) : (tensor<1x4x?x16xf32, #map>, tensor<1x4x?x16xf32, #map>) -> tensor<1x4x?x16xf32, #map>
    return %6 : tensor<1x4x?x16xf32, #map>
  }
}
