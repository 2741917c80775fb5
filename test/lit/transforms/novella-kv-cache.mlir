// RUN: novella-opt %s --novella-kv-cache=page-size=16 --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-kv-cache --split-input-file | FileCheck %s --check-prefix=OFF

// Decode: the cache append (cat onto the function input %past) is paged, slot 0; the matmul
// reads the cache through a GQA head repeat (reshape, broadcast, reshape), which is erased:
// the matmul reads the paged cache itself, two query heads per cache head.
// CHECK-LABEL: func.func @decode
// CHECK-SAME: novella.kv_cache = {args = {"1" = 0 : i64}, page_size = 16 : i64, results = [1], slots = [{head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64}]}
// CHECK: %[[K:.*]] = "novella.kv_append"(%arg1, %arg2) {dim = 2 : i64, novella.paged = {head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, slot = 0 : i64}}
// CHECK-NOT: novella.broadcast
// CHECK: %[[S:.*]] = "novella.matmul"(%arg0, %[[K]]) {novella.kv_group = 2 : i64, novella.paged_rhs = {{{.*}}slot = 0 : i64}, transpose_rhs = true}
// CHECK: return %[[S]], %[[K]]
// OFF-LABEL: func.func @decode
// OFF: "novella.broadcast"
// OFF-NOT: novella.paged
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @decode(%q: tensor<1x4x1x16xf32>, %past: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %new: tensor<1x2x1x16xf32>) -> (tensor<1x4x1x?xf32, affine_map<()[s0] -> (1, 4, 1, s0 + 1)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%past, %new) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %g = "novella.reshape"(%k) : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) -> tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>
    %b = "novella.broadcast"(%g) : (tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>
    %r = "novella.reshape"(%b) : (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %s = "novella.matmul"(%q, %r) {transpose_rhs = true} : (tensor<1x4x1x16xf32>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>) -> tensor<1x4x1x?xf32, affine_map<()[s0] -> (1, 4, 1, s0 + 1)>>
    return %s, %k : tensor<1x4x1x?xf32, affine_map<()[s0] -> (1, 4, 1, s0 + 1)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
  }
}

// -----

// Prefill: a returned [1, heads, T, head_dim] tensor that an attention matmul reads is a cache
// write: it is returned through a novella.kv_write into its pages; the matmul itself reads the
// contiguous tensor (no novella.paged_rhs). Two symbols: s0 the prompt length, s1 unused.
// CHECK-LABEL: func.func @prefill
// CHECK-SAME: novella.kv_cache = {args = {}, page_size = 16 : i64, results = [1]
// CHECK: %[[S:.*]] = "novella.matmul"(%arg0, %arg1) {transpose_rhs = true}
// CHECK: %[[W:.*]] = "novella.kv_write"(%arg1) {novella.paged = {head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, slot = 0 : i64}}
// CHECK: return %[[S]], %[[W]]
// OFF-LABEL: func.func @prefill
// OFF-NOT: novella.kv_write
module attributes {novella.symbols = {s0 = ["T", 1, 1024], s1 = ["B", 1, 4]}} {
  func.func @prefill(%q: tensor<1x2x?x16xf32, affine_map<()[s0, s1] -> (1, 2, s0, 16)>>, %k: tensor<1x2x?x16xf32, affine_map<()[s0, s1] -> (1, 2, s0, 16)>>) -> (tensor<1x2x?x?xf32, affine_map<()[s0, s1] -> (1, 2, s0, s0)>>, tensor<1x2x?x16xf32, affine_map<()[s0, s1] -> (1, 2, s0, 16)>>) {
    %s = "novella.matmul"(%q, %k) {transpose_rhs = true} : (tensor<1x2x?x16xf32, affine_map<()[s0, s1] -> (1, 2, s0, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0, s1] -> (1, 2, s0, 16)>>) -> tensor<1x2x?x?xf32, affine_map<()[s0, s1] -> (1, 2, s0, s0)>>
    return %s, %k : tensor<1x2x?x?xf32, affine_map<()[s0, s1] -> (1, 2, s0, s0)>>, tensor<1x2x?x16xf32, affine_map<()[s0, s1] -> (1, 2, s0, 16)>>
  }
}

// -----

// Decode into a fused attention: its key and value are read through GQA head repeats of the two
// appends; both repeats are erased, the op reads the paged caches (slots 0 and 1) with two query
// heads per cache head.
// CHECK-LABEL: func.func @fused
// CHECK: %[[K:.*]] = "novella.kv_append"(%arg1, %arg3) {{{.*}}slot = 0 : i64}}
// CHECK: %[[V:.*]] = "novella.kv_append"(%arg2, %arg4) {{{.*}}slot = 1 : i64}}
// CHECK-NOT: novella.broadcast
// CHECK: %[[O:.*]] = "novella.flash_attention"(%arg0, %[[K]], %[[V]]) {{{.*}}novella.kv_group = 2 : i64, novella.paged_key = {{{.*}}slot = 0 : i64}, novella.paged_value = {{{.*}}slot = 1 : i64}
// CHECK: return %[[O]], %[[K]], %[[V]]
// OFF-LABEL: func.func @fused
// OFF-NOT: novella.paged
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @fused(%q: tensor<1x4x1x16xf32>, %pk: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %pv: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %nk: tensor<1x2x1x16xf32>, %nv: tensor<1x2x1x16xf32>) -> (tensor<1x4x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%pk, %nk) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %v = "novella.kv_append"(%pv, %nv) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %kg = "novella.reshape"(%k) : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) -> tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>
    %kb = "novella.broadcast"(%kg) : (tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>
    %kr = "novella.reshape"(%kb) : (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %vg = "novella.reshape"(%v) : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) -> tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>
    %vb = "novella.broadcast"(%vg) : (tensor<1x2x1x?x16xf32, affine_map<()[s0] -> (1, 2, 1, s0 + 1, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>
    %vr = "novella.reshape"(%vb) : (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %o = "novella.flash_attention"(%q, %kr, %vr) {causal = 0 : i64, heads_minor = array<i64: 0, 0, 0, 0>, operandSegmentSizes = array<i32: 1, 1, 1, 0>, scale = 0.25 : f32} : (tensor<1x4x1x16xf32>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>) -> tensor<1x4x1x16xf32>
    return %o, %k, %v : tensor<1x4x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
  }
}

// -----

// A batched decode step: the cache [3, heads, ?, head_dim] of three sequences is paged with a
// virtual page range per sequence (seq_pages = 2^24 / page_elems / 3), each its own block table.
// CHECK-LABEL: func.func @batched
// CHECK-SAME: slots = [{batch = 3 : i64, head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, seq_pages = 10922 : i64}]
// CHECK: %[[K:.*]] = "novella.kv_append"(%arg0, %arg1) {dim = 2 : i64, novella.paged = {batch = 3 : i64, head_dim = 16 : i64, heads = 2 : i64, page_elems = 512 : i64, page_size = 16 : i64, seq_pages = 10922 : i64, slot = 0 : i64}}
// CHECK: return %[[K]]
// OFF-LABEL: func.func @batched
// OFF-NOT: novella.paged
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @batched(%past: tensor<3x2x?x16xf32, affine_map<()[s0] -> (3, 2, s0, 16)>>, %new: tensor<3x2x1x16xf32>) -> tensor<3x2x?x16xf32, affine_map<()[s0] -> (3, 2, s0 + 1, 16)>> {
    %k = "novella.kv_append"(%past, %new) {dim = 2 : i64} : (tensor<3x2x?x16xf32, affine_map<()[s0] -> (3, 2, s0, 16)>>, tensor<3x2x1x16xf32>) -> tensor<3x2x?x16xf32, affine_map<()[s0] -> (3, 2, s0 + 1, 16)>>
    return %k : tensor<3x2x?x16xf32, affine_map<()[s0] -> (3, 2, s0 + 1, 16)>>
  }
}
