// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// The generic path's elementwise op (torch-mlir's linalg.generic body, e.g. hardshrink's
// where(|x| > l, x, 0) * s): the body's ops are one VEC each, the constants immediates;
// the [?, 1] operand is read as a column (COL mode) and the [1, 64] one by a DMA that
// repeats its row (row_step 0), as the indexing maps say; a step's LOADs are one DMA chain (chain = 1
// after the first: one exposed latency).
// CHECK-LABEL: func.func @shrink
// CHECK: %[[G:.*]] = "novella.generic"(%{{.*}}, %{{.*}}, %{{.*}}) ({
// CHECK: ^bb0(%[[X:.*]]: f32, %[[C:.*]]: f32, %[[R:.*]]: f32):
// CHECK: %[[A:.*]] = math.absf %[[X]]
// CHECK: %[[M:.*]] = arith.cmpf ogt, %[[A]], %[[C]]
// CHECK: %[[S:.*]] = arith.select %[[M]], %[[X]], %{{.*}}
// CHECK: %[[Y:.*]] = arith.mulf %[[S]], %[[R]]
// CHECK: "novella.yield"(%[[Y]])
// CHECK: -> tensor<?x64xf32, #{{.*}}>
// MACRO-LABEL: func.func @shrink
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p0"
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p1", chain = 1 : i64, cols = 1 : i64
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p2", {{.*}}row_bound = 1 : i64, row_start = 0 : i64, row_step = 0 : i64
// MACRO: "novella.vop"() {a = "p0", {{.*}}dst = "[[ABS:p[0-9]+]]", {{.*}}fn = "ABS"
// MACRO: "novella.vop"() {a = "[[ABS]]", {{.*}}b = "p1", b_stride = 1 : i64, {{.*}}dst = "[[MASK:p[0-9]+]]", {{.*}}fn = "GT", mode = "COL"
// MACRO: "novella.vop"() {{{.*}}dst = "[[SEL:p[0-9]+]]", {{.*}}fn = "FILL", imm = 0.000000e+00
// MACRO: "novella.vop"() {a = "[[MASK]]", {{.*}}b = "p0", {{.*}}dst = "[[SEL]]", {{.*}}fn = "SEL"
// MACRO: "novella.vop"() {a = "[[SEL]]", {{.*}}b = "p2", {{.*}}dst = "p5", {{.*}}fn = "MUL"
// The inputs and the result stream (two slots: double buffered), the body's temporaries do not; the
// [?, 1] column's buffer is [tm, 1] (64 elements), not a [tm, tc] tile.
// MACRO: buffers = {p0 = ["spad", 0, 4096, 2], p1 = ["spad", 8192, 64, 2], {{.*}}p3 = ["spad", 16512, 4096], p4 = ["spad", 20608, 4096], p5 = ["spad", 24704, 4096, 2]}, {{.*}}kernel = "novella.generic"
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d0, 0)>
#row = affine_map<(d0, d1) -> (0, d1)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @shrink(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, %l: tensor<?x1xf32, affine_map<()[s0] -> (s0, 1)>>, %s: tensor<1x64xf32>) -> tensor<?x64xf32> {
    %0 = "novella.generic"(%x, %l, %s) ({
    ^bb0(%a: f32, %c: f32, %r: f32):
      %zero = arith.constant 0.000000e+00 : f32
      %1 = math.absf %a : f32
      %2 = arith.cmpf ogt, %1, %c : f32
      %3 = arith.select %2, %a, %zero : f32
      %4 = arith.mulf %3, %r : f32
      "novella.yield"(%4) : (f32) -> ()
    }) {indexing_maps = [#id, #col, #row], operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>, tensor<?x1xf32, affine_map<()[s0] -> (s0, 1)>>, tensor<1x64xf32>) -> tensor<?x64xf32>
    return %0 : tensor<?x64xf32>
  }
}

// -----

// Two `?` dims, the last one too (tiled by 512, partial at its end), an f64 body demoted to f32
// (said in the IR): exp(x - m) with m a [1, ?] row repeated by the DMA.
// CHECK-LABEL: func.func @two_dynamic
// CHECK: "novella.generic"
// CHECK: demoted = "f64"
// CHECK-SAME: -> tensor<?x?xf32, #{{.*}}>
// MACRO-DAG: #[[COLS:.*]] = affine_map<(d0, d1)[s0, s1] -> (512, d1 * -512 + s1)>
// MACRO-LABEL: func.func @two_dynamic
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "p1", chain = 1 : i64, cols = #[[COLS]], {{.*}}row_step = 0 : i64
// MACRO: "novella.vop"() {a = "p0", {{.*}}b = "p1", {{.*}}cols = #[[COLS]], {{.*}}fn = "SUB"
// MACRO: "novella.vop"() {{{.*}}fn = "EXP"
// MACRO: kernel = "novella.generic"
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row2 = affine_map<(d0, d1) -> (0, d1)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048], s1 = ["P", 1, 2048]}} {
  func.func @two_dynamic(%x: tensor<?x?xf32, affine_map<()[s0, s1] -> (s0, s1)>>, %m: tensor<1x?xf32, affine_map<()[s0, s1] -> (1, s1)>>) -> tensor<?x?xf32> {
    %0 = "novella.generic"(%x, %m) ({
    ^bb0(%a: f32, %b: f32):
      %1 = arith.subf %a, %b : f32
      %2 = math.exp %1 : f32
      "novella.yield"(%2) : (f32) -> ()
    }) {demoted = "f64", indexing_maps = [#id2, #row2], operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0>} : (tensor<?x?xf32, affine_map<()[s0, s1] -> (s0, s1)>>, tensor<1x?xf32, affine_map<()[s0, s1] -> (1, s1)>>) -> tensor<?x?xf32>
    return %0 : tensor<?x?xf32>
  }
}

// -----

// --novella-legalize fuses a chain: the producer's only use, read through the identity map, is
// inlined into its consumer (the value never goes to DRAM); x, read by both at one map, is loaded once.
// CHECK-LABEL: func.func @chain
// CHECK-COUNT-2: "novella.generic"
// MACRO-LABEL: func.func @chain
// MACRO-COUNT-1: "novella.dma_load"
// MACRO: "novella.vop"() {a = "p0", {{.*}}fn = "MUL"
// MACRO: "novella.vop"() {{{.*}}fn = "ADD", {{.*}}mode = "SCALAR"
// MACRO: "novella.vop"() {{{.*}}b = "p0", {{.*}}fn = "MUL"
// MACRO: kernel = "novella.generic"
// MACRO-NOT: kernel = "novella.generic"
#idc = affine_map<(d0, d1) -> (d0, d1)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @chain(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32> {
    %0 = "novella.generic"(%x) ({
    ^bb0(%a: f32):
      %one = arith.constant 1.000000e+00 : f32
      %1 = arith.mulf %a, %a : f32
      %2 = arith.addf %1, %one : f32
      "novella.yield"(%2) : (f32) -> ()
    }) {indexing_maps = [#idc], operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0>} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32>
    %3 = "novella.generic"(%0, %x) ({
    ^bb0(%p: f32, %a: f32):
      %4 = arith.mulf %p, %a : f32
      "novella.yield"(%4) : (f32) -> ()
    }) {indexing_maps = [#idc, #idc], operandSegmentSizes = array<i32: 1, 1, 0, 0, 0, 0>} : (tensor<?x64xf32>, tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32>
    return %3 : tensor<?x64xf32>
  }
}

