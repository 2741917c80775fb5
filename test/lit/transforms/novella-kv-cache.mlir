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

// Prefill of a multi-query model (one KV head): the value's head transpose [1, ?, 1, 16] ->
// [1, 1, ?, 16] is a reshape, and the head repeat the attention reads starts from it. The walk
// back from the matmul passes the returned value (%v): it is the cache, written to its pages.
// CHECK-LABEL: func.func @prefill_mqa
// CHECK-SAME: novella.kv_cache = {args = {}, page_size = 16 : i64, results = [1], slots = [{head_dim = 16 : i64, heads = 1 : i64, page_elems = 256 : i64}]}
// CHECK: %[[V4:.*]] = "novella.reshape"(%arg1)
// CHECK: %[[V:.*]] = "novella.reshape"(%[[V4]]) : (tensor<1x?x1x16xf32, {{.*}}>) -> tensor<1x1x?x16xf32
// CHECK: %[[O:.*]] = "novella.matmul"(%arg0, %{{.*}}) {transpose_rhs = false}
// CHECK: %[[W:.*]] = "novella.kv_write"(%[[V]]) {novella.paged = {head_dim = 16 : i64, heads = 1 : i64, page_elems = 256 : i64, page_size = 16 : i64, slot = 0 : i64}}
// CHECK: return %[[O]], %[[W]]
// OFF-LABEL: func.func @prefill_mqa
// OFF-NOT: novella.kv_write
module attributes {novella.symbols = {s0 = ["T", 1, 1024]}} {
  func.func @prefill_mqa(%p: tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>, %v3: tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>) -> (tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, tensor<1x1x?x16xf32, affine_map<()[s0] -> (1, 1, s0, 16)>>) {
    %v4 = "novella.reshape"(%v3) : (tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>) -> tensor<1x?x1x16xf32, affine_map<()[s0] -> (1, s0, 1, 16)>>
    %v = "novella.reshape"(%v4) : (tensor<1x?x1x16xf32, affine_map<()[s0] -> (1, s0, 1, 16)>>) -> tensor<1x1x?x16xf32, affine_map<()[s0] -> (1, 1, s0, 16)>>
    %g = "novella.reshape"(%v) : (tensor<1x1x?x16xf32, affine_map<()[s0] -> (1, 1, s0, 16)>>) -> tensor<1x1x1x?x16xf32, affine_map<()[s0] -> (1, 1, 1, s0, 16)>>
    %b = "novella.broadcast"(%g) : (tensor<1x1x1x?x16xf32, affine_map<()[s0] -> (1, 1, 1, s0, 16)>>) -> tensor<1x1x4x?x16xf32, affine_map<()[s0] -> (1, 1, 4, s0, 16)>>
    %r = "novella.reshape"(%b) : (tensor<1x1x4x?x16xf32, affine_map<()[s0] -> (1, 1, 4, s0, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
    %o = "novella.matmul"(%p, %r) {transpose_rhs = false} : (tensor<1x4x?x?xf32, affine_map<()[s0] -> (1, 4, s0, s0)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>
    return %o, %v : tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, tensor<1x1x?x16xf32, affine_map<()[s0] -> (1, 1, s0, 16)>>
  }
}

// -----

// Decode of an ALiBi model (BLOOM's `baddbmm`): the cache is read flattened to [heads, ?, 16].
// The matmul reads the paged cache itself at the cache's rank: its lhs is viewed as
// [1, 4, 1, 16] and its result [1, 4, 1, ?] is viewed back as [4, 1, ?] for its users.
// CHECK-LABEL: func.func @decode_flat
// CHECK: %[[K:.*]] = "novella.kv_append"(%arg1, %arg2) {{{.*}}slot = 0 : i64}}
// CHECK-NOT: "novella.reshape"(%[[K]])
// CHECK: %[[Q:.*]] = "novella.reshape"(%arg0) : (tensor<4x1x16xf32>) -> tensor<1x4x1x16xf32>
// CHECK: %[[S:.*]] = "novella.matmul"(%[[Q]], %[[K]]) {novella.kv_group = 1 : i64, novella.paged_rhs = {{{.*}}slot = 0 : i64}, transpose_rhs = true} : {{.*}} -> tensor<1x4x1x?xf32, #{{.*}}>
// CHECK: %[[F:.*]] = "novella.reshape"(%[[S]]) : (tensor<1x4x1x?xf32, {{.*}}>) -> tensor<4x1x?xf32
// CHECK: return %[[F]], %[[K]]
// OFF-LABEL: func.func @decode_flat
// OFF: "novella.matmul"(%arg0, %{{.*}}) {transpose_rhs = true}
// OFF-NOT: novella.paged
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @decode_flat(%q: tensor<4x1x16xf32>, %past: tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, %new: tensor<1x4x1x16xf32>) -> (tensor<4x1x?xf32, affine_map<()[s0] -> (4, 1, s0 + 1)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%past, %new) {dim = 2 : i64} : (tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0, 16)>>, tensor<1x4x1x16xf32>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %f = "novella.reshape"(%k) : (tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>) -> tensor<4x?x16xf32, affine_map<()[s0] -> (4, s0 + 1, 16)>>
    %s = "novella.matmul"(%q, %f) {transpose_rhs = true} : (tensor<4x1x16xf32>, tensor<4x?x16xf32, affine_map<()[s0] -> (4, s0 + 1, 16)>>) -> tensor<4x1x?xf32, affine_map<()[s0] -> (4, 1, s0 + 1)>>
    return %s, %k : tensor<4x1x?xf32, affine_map<()[s0] -> (4, 1, s0 + 1)>>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
  }
}

// -----

// Decode with a sliding-window mask built from the positions (`arange`: an iota weight; the past
// length: a sum of ones sliced to s0): x > P - 8 and x <= P, i.e. the last 8 of the s0 + 1 cached
// positions. The attention is marked `novella.kv_window = 8`; every cache reader is windowed, so
// the function's cache says `window = 8` (the runtime frees the pages before it).
// CHECK-LABEL: func.func @window
// CHECK-SAME: novella.kv_cache = {args = {"1" = 0 : i64, "2" = 1 : i64}, page_size = 16 : i64, results = [1, 2], slots = [{{.*}}], window = 8 : i64}
// CHECK: "novella.flash_attention"({{.*}}novella.kv_window = 8 : i64
// OFF-LABEL: func.func @window
// OFF-NOT: novella.kv_window
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @window(%q: tensor<1x2x1x16xf32>, %pk: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %pv: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %nk: tensor<1x2x1x16xf32>, %nv: tensor<1x2x1x16xf32>) -> (tensor<1x2x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%pk, %nk) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %v = "novella.kv_append"(%pv, %nv) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %pos = "novella.weight"() {name = "arange", novella.iota} : () -> tensor<1024xf32>
    %kv1 = "novella.slice"(%pos) {dim = 0 : i64, start = 0 : i64} : (tensor<1024xf32>) -> tensor<?xf32, affine_map<()[s0] -> (s0 + 1)>>
    %kv = "novella.reshape"(%kv1) : (tensor<?xf32, affine_map<()[s0] -> (s0 + 1)>>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %ones = "novella.weight"() {name = "ones", novella.splat = 1.0 : f64} : () -> tensor<1x1023xf32>
    %o1 = "novella.slice"(%ones) {dim = 1 : i64, start = 0 : i64} : (tensor<1x1023xf32>) -> tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>
    %p2 = "novella.reduce"(%o1) {fn = "sum"} : (tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x1xf32>
    %p = "novella.reshape"(%p2) : (tensor<1x1xf32>) -> tensor<1x1x1x1xf32>
    %lo = "novella.scalar"(%p) {fn = "sub", value = 8.0 : f32} : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
    %a = "novella.compare"(%kv, %lo) {fn = "gt"} : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<1x1x1x1xf32>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %hi = "novella.scalar"(%p) {fn = "sub", value = 0.0 : f32} : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
    %b = "novella.compare"(%kv, %hi) {fn = "le"} : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<1x1x1x1xf32>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %c = "novella.mul"(%a, %b) : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %zero = "novella.weight"() {name = "zero", novella.splat = 0.0 : f64} : () -> tensor<f32>
    %ninf = "novella.weight"() {name = "ninf", novella.splat = 0xFFF0000000000000 : f64} : () -> tensor<f32>
    %m = "novella.where"(%c, %zero, %ninf) : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<f32>, tensor<f32>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %o = "novella.flash_attention"(%q, %k, %v, %m) {causal = 0 : i64, heads_minor = array<i64: 0, 0, 0, 0>, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 0.25 : f32} : (tensor<1x2x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>) -> tensor<1x2x1x16xf32>
    return %o, %k, %v : tensor<1x2x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
  }
}

// -----

// The same band ending at P - 1: not the last positions of the cache (the newest key is masked),
// so no window is claimed and nothing is freed.
// CHECK-LABEL: func.func @not_a_window
// CHECK-NOT: window =
// CHECK: "novella.flash_attention"
// CHECK-NOT: novella.kv_window
// CHECK: return
module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @not_a_window(%q: tensor<1x2x1x16xf32>, %pk: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %pv: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %nk: tensor<1x2x1x16xf32>, %nv: tensor<1x2x1x16xf32>) -> (tensor<1x2x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%pk, %nk) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %v = "novella.kv_append"(%pv, %nv) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %pos = "novella.weight"() {name = "arange", novella.iota} : () -> tensor<1024xf32>
    %kv1 = "novella.slice"(%pos) {dim = 0 : i64, start = 0 : i64} : (tensor<1024xf32>) -> tensor<?xf32, affine_map<()[s0] -> (s0 + 1)>>
    %kv = "novella.reshape"(%kv1) : (tensor<?xf32, affine_map<()[s0] -> (s0 + 1)>>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %ones = "novella.weight"() {name = "ones", novella.splat = 1.0 : f64} : () -> tensor<1x1023xf32>
    %o1 = "novella.slice"(%ones) {dim = 1 : i64, start = 0 : i64} : (tensor<1x1023xf32>) -> tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>
    %p2 = "novella.reduce"(%o1) {fn = "sum"} : (tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x1xf32>
    %p = "novella.reshape"(%p2) : (tensor<1x1xf32>) -> tensor<1x1x1x1xf32>
    %lo = "novella.scalar"(%p) {fn = "sub", value = 8.0 : f32} : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
    %a = "novella.compare"(%kv, %lo) {fn = "gt"} : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<1x1x1x1xf32>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %hi = "novella.scalar"(%p) {fn = "sub", value = 1.0 : f32} : (tensor<1x1x1x1xf32>) -> tensor<1x1x1x1xf32>
    %b = "novella.compare"(%kv, %hi) {fn = "le"} : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<1x1x1x1xf32>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %c = "novella.mul"(%a, %b) : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %zero = "novella.weight"() {name = "zero", novella.splat = 0.0 : f64} : () -> tensor<f32>
    %ninf = "novella.weight"() {name = "ninf", novella.splat = 0xFFF0000000000000 : f64} : () -> tensor<f32>
    %m = "novella.where"(%c, %zero, %ninf) : (tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>, tensor<f32>, tensor<f32>) -> tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>
    %o = "novella.flash_attention"(%q, %k, %v, %m) {causal = 0 : i64, heads_minor = array<i64: 0, 0, 0, 0>, operandSegmentSizes = array<i32: 1, 1, 1, 1>, scale = 0.25 : f32} : (tensor<1x2x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x1x1x?xf32, affine_map<()[s0] -> (1, 1, 1, s0 + 1)>>) -> tensor<1x2x1x16xf32>
    return %o, %k, %v : tensor<1x2x1x16xf32>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
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
