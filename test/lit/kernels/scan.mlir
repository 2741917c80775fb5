// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --novella-inst-gen --novella-schedule --split-input-file | FileCheck %s --check-prefix=SCHED

// cumsum along the dynamic last dim (columns form, OPT's positions): grid (row tiles, column
// tiles of 1024), the column loop d1 carried. A tile of min(1024, s0 - 1024 d1) columns (row
// stride s0) is scanned by Hillis-Steele levels x -> p -> q -> ... -> out; every column step but
// the first adds the carry column (COL), every step but the last copies out's last column to it.
// CHECK-DAG: #[[X:.*]] = affine_map<()[s0] -> (1, s0)>
// CHECK-LABEL: func.func @cumsum_length
// CHECK: %[[S:.*]] = "novella.scan"(%{{.*}}) {dim = 1 : i64, fn = "sum"} : (tensor<1x?xf32, #[[X]]>) -> tensor<1x?xf32, #[[X]]>
// CHECK: return %[[S]]
// MACRO-DAG: #[[COLS:.*]] = affine_map<(d0, d1)[s0] -> (1024, d1 * -1024 + s0)>
// MACRO-DAG: #[[AT:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 1024)>
// MACRO-DAG: #[[STRIDE:.*]] = affine_map<(d0, d1)[s0] -> (s0)>
// MACRO-DAG: #[[NOTFIRST:.*]] = affine_set<(d0, d1)[s0] : (d1 - 1 >= 0)>
// MACRO-DAG: #[[NOTLAST:.*]] = affine_set<(d0, d1)[s0] : (-d1 + s0 ceildiv 1024 - 2 >= 0)>
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 1024)>
// MACRO-LABEL: func.func @cumsum_length
// MACRO: %[[M:.*]] = "novella.macro"() ({
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = #[[COLS]], dram_offset = #[[AT]], dram_stride = #[[STRIDE]], {{.*}}sram_stride = 1024 : i64
// MACRO-NEXT: "novella.vop"() {a = "x", a_offset = 1 : i64, {{.*}}b = "x", b_offset = 0 : i64, {{.*}}cols = 1023 : i64, dst = "p", dst_offset = 1 : i64, {{.*}}fn = "ADD"
// MACRO-NEXT: "novella.vop"() {a = "x", a_offset = 0 : i64, {{.*}}cols = 1 : i64, dst = "p", dst_offset = 0 : i64, {{.*}}fn = "COPY"
// MACRO: "novella.vop"() {a = "p", a_offset = 512 : i64, {{.*}}cols = 512 : i64, dst = "out", dst_offset = 512 : i64, {{.*}}fn = "ADD"
// MACRO-NEXT: "novella.vop"() {a = "p", a_offset = 0 : i64, {{.*}}cols = 512 : i64, dst = "out", dst_offset = 0 : i64, {{.*}}fn = "COPY"
// MACRO-NEXT: "novella.vop"() {a = "out", {{.*}}b = "carry", b_stride = 1 : i64, cols = 1024 : i64, dst = "out", {{.*}}fn = "ADD", mode = "COL", {{.*}}when = #[[NOTFIRST]]}
// MACRO-NEXT: "novella.vop"() {a = "out", a_offset = 1023 : i64, {{.*}}cols = 1 : i64, dst = "carry", {{.*}}fn = "COPY", {{.*}}when = #[[NOTLAST]]}
// MACRO-NEXT: "novella.dma_store"() {buffer = "out", cols = #[[COLS]], dram_offset = #[[AT]], dram_stride = #[[STRIDE]]
// MACRO: buffers = {carry = ["spad", {{[0-9]+}}, 1], out = ["spad", {{[0-9]+}}, 1024, 2], p = ["spad", {{[0-9]+}}, 1024], q = ["spad", {{[0-9]+}}, 1024], x = ["spad", 0, 1024, 2]}, {{.*}}grid = #[[GRID]], kernel = "novella.scan", {{.*}}tiles = {carry = 1 : i64, tc = 1024 : i64, tr = 1 : i64}
// MACRO: return %[[M]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @cumsum_length(%x: tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?xf32> {
    %0 = "novella.scan"(%x) {dim = 1 : i64, fn = "sum"} : (tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?xf32>
    return %0 : tensor<1x?xf32>
  }
}

// -----

// cumprod along the dynamic middle dim (rows form): grid (2, 1, T tiles of 64), d2 carried.
// Levels shift whole rows (offsets in multiples of 8); every row step but the first multiplies
// by the carry row (ROW), and all but the last copy out's row 63 to it. The partial last tile's
// rows past s0 are zeros from the LOAD and never stored.
// CHECK-LABEL: func.func @cumprod_rows
// CHECK: %[[P:.*]] = "novella.scan"(%{{.*}}) {dim = 1 : i64, fn = "prod"} : (tensor<2x?x8xf32, #{{.*}}>) -> tensor<2x?x8xf32, #{{.*}}>
// CHECK: return %[[P]]
// MACRO-DAG: #[[BASE:.*]] = affine_map<(d0, d1, d2)[s0] -> (d0 * (s0 * 8) + d1 * 8)>
// MACRO-DAG: #[[FROM:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2 * 64)>
// MACRO-DAG: #[[ROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (64, d2 * -64 + s0)>
// MACRO-DAG: #[[NOTFIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d2 - 1 >= 0)>
// MACRO-LABEL: func.func @cumprod_rows
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = 8 : i64, dram_offset = #[[BASE]], dram_stride = 8 : i64, {{.*}}row_start = #[[FROM]], row_step = 1 : i64, rows = 64 : i64
// MACRO-NEXT: "novella.vop"() {a = "x", a_offset = 8 : i64, {{.*}}b = "x", b_offset = 0 : i64, {{.*}}dst = "p", dst_offset = 8 : i64, {{.*}}fn = "MUL", rows = 63 : i64}
// MACRO-NEXT: "novella.vop"() {a = "x", a_offset = 0 : i64, {{.*}}dst = "p", dst_offset = 0 : i64, {{.*}}fn = "COPY", rows = 1 : i64}
// MACRO: "novella.vop"() {a = "out", {{.*}}b = "carry", cols = 8 : i64, dst = "out", {{.*}}fn = "MUL", mode = "ROW", rows = 64 : i64, when = #[[NOTFIRST]]}
// MACRO-NEXT: "novella.vop"() {a = "out", a_offset = 504 : i64, {{.*}}dst = "carry", {{.*}}fn = "COPY", rows = 1 : i64, when = #{{.*}}}
// MACRO-NEXT: "novella.dma_store"() {buffer = "out", {{.*}}dram_offset = #[[BASE]], {{.*}}rows = #[[ROWS]]
// MACRO: kernel = "novella.scan"{{.*}}tiles = {carry = 2 : i64, tm = 64 : i64, tn = 8 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @cumprod_rows(%x: tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x?x8xf32> {
    %0 = "novella.scan"(%x) {dim = 1 : i64, fn = "prod"} : (tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x?x8xf32>
    return %0 : tensor<2x?x8xf32>
  }
}

// -----

// cumsum along a static dim of 4 with the length outside it: one column step, so no carry ops.
// After --novella-schedule the streamed x and out get two slots (loads under the previous step's
// VEC ops, stores under the next's); the scratch p and carry stay single-slot.
// CHECK-LABEL: func.func @cumsum_static
// CHECK: %[[C:.*]] = "novella.scan"(%{{.*}}) {dim = 1 : i64, fn = "sum"} : (tensor<?x4xf32, #{{.*}}>) -> tensor<?x4xf32, #{{.*}}>
// CHECK: return %[[C]]
// MACRO-LABEL: func.func @cumsum_static
// MACRO-NOT: "carry"
// MACRO: tiles = {carry = 1 : i64, tc = 4 : i64
// SCHED-LABEL: func.func @cumsum_static
// SCHED: %[[N:.*]] = "novella.macro"() ({
// SCHED-NEXT: "novella.inst"(%{{.*}}) {{{.*}}opcode = "LOAD", {{.*}}slot = {sram_addr = [[SLOT:[0-9]+]] : i64}, sram_addr = 0 : i64
// SCHED-NEXT: "novella.inst"() {{{.*}}fn = "ADD", mode = "TENSOR", opcode = "VEC", {{.*}}slot = {a_addr = [[SLOT]] : i64, b_addr = [[SLOT]] : i64}}
// SCHED-NEXT: "novella.inst"() {{{.*}}fn = "COPY", {{.*}}slot = {a_addr = [[SLOT]] : i64}}
// SCHED-NEXT: "novella.inst"() {{{.*}}fn = "ADD", {{.*}}slot = {dst_addr = [[SLOT]] : i64}}
// SCHED-NEXT: "novella.inst"() {{{.*}}fn = "COPY", {{.*}}slot = {dst_addr = [[SLOT]] : i64}}
// SCHED-NEXT: "novella.inst"() {{{.*}}opcode = "STORE", {{.*}}slot = {sram_addr = [[SLOT]] : i64}
// SCHED: schedule = {load_slots = 2 : i64, store_slots = 2 : i64}
// SCHED: return %[[N]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @cumsum_static(%x: tensor<?x4xf32, affine_map<()[s0] -> (s0, 4)>>) -> tensor<?x4xf32> {
    %0 = "novella.scan"(%x) {dim = 1 : i64, fn = "sum"} : (tensor<?x4xf32, affine_map<()[s0] -> (s0, 4)>>) -> tensor<?x4xf32>
    return %0 : tensor<?x4xf32>
  }
}
