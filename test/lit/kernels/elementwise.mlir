// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// A division by a per-row column: the right operand is read in COL mode, one value per row.
// CHECK-DAG: #[[X:.*]] = affine_map<()[s0] -> (1, s0, 64)>
// CHECK-LABEL: func.func @div_col
// CHECK-SAME: (%[[A:.*]]: tensor<1x?x64xf32, #[[X]]>, %[[B:.*]]: tensor<1x?x1xf32, #{{.*}}>)
// CHECK: %[[D:.*]] = "novella.div"(%[[A]], %[[B]]) : ({{.*}}) -> tensor<1x?x64xf32, #[[X]]>
// CHECK: return %[[D]]
// MACRO-DAG: #[[ROWS:.*]] = affine_map<(d0)[s0] -> (64, d0 * -64 + s0)>
// MACRO-LABEL: func.func @div_col
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t1", cols = 1 : i64
// MACRO: "novella.vop"() {a = "t0", {{.*}}b = "t1", b_stride = 1 : i64, {{.*}}fn = "DIV", mode = "COL", rows = #[[ROWS]]}
// MACRO: kernel = "novella.div"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @div_col(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, %y: tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x64xf32> {
    %0 = "novella.div"(%x, %y) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x64xf32>
    return %0 : tensor<1x?x64xf32>
  }
}

// -----

// A compile-time scalar (rsub: imm - x) and a relu on a `?` row count.
// CHECK-LABEL: func.func @scalar_relu
// CHECK: %[[S:.*]] = "novella.scalar"(%{{.*}}) {fn = "rsub", value = 1.000000e+00 : f32} : ({{.*}}) -> tensor<?x32xf32, #[[M:.*]]>
// CHECK: %[[R:.*]] = "novella.relu"(%[[S]]) : ({{.*}}) -> tensor<?x32xf32, #[[M]]>
// MACRO-LABEL: func.func @scalar_relu
// MACRO: "novella.vop"() {a = "t0", {{.*}}fn = "MUL", imm = -1.000000e+00 : f32, mode = "SCALAR"
// MACRO: "novella.vop"() {a = "t1", {{.*}}fn = "ADD", imm = 1.000000e+00 : f32, mode = "SCALAR"
// MACRO: kernel = "novella.scalar"
// MACRO: "novella.vop"() {a = "t0", {{.*}}fn = "RELU"
// MACRO: kernel = "novella.relu"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @scalar_relu(%x: tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>) -> tensor<?x32xf32> {
    %0 = "novella.scalar"(%x) {fn = "rsub", value = 1.0 : f32} : (tensor<?x32xf32, affine_map<()[s0] -> (s0, 32)>>) -> tensor<?x32xf32>
    %1 = "novella.relu"(%0) : (tensor<?x32xf32>) -> tensor<?x32xf32>
    return %1 : tensor<?x32xf32>
  }
}
