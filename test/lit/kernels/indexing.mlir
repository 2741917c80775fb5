// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --novella-inst-gen --split-input-file | FileCheck %s --check-prefix=INST

// An embedding lookup: per row tile a LOAD of the ids (held as f32) into `idx`, then one
// GATHER of the table rows they pick; the rows are [T] and the partial last tile min(64, T - 64*d0).
// CHECK-DAG: #[[E:.*]] = affine_map<()[s0] -> (1, s0, 64)>
// CHECK-LABEL: func.func @embed
// CHECK: %[[W:.*]] = "novella.weight"() {name = "wte"}
// CHECK: "novella.gather_rows"(%[[W]], %{{.*}}) : (tensor<1000x64xf32>, {{.*}}) -> tensor<1x?x64xf32, #[[E]]>
// INST-DAG: #[[R:.*]] = affine_map<(d0)[s0] -> (64, d0 * -64 + s0)>
// INST-LABEL: func.func @embed
// INST: "novella.inst"(%{{.*}}) {cols = 1 : i64, {{.*}}opcode = "LOAD", {{.*}}rows = #[[R]], sram_addr = 0 : i64
// INST: "novella.inst"(%{{.*}}) {cols = 64 : i64, dram_base = 0 : i64, dram_stride = 64 : i64, idx_addr = 0 : i64, idx_mem = 0 : i64, mem = 0 : i64, opcode = "GATHER", row_bound = 1000 : i64, rows = #[[R]]
// INST: kernel = "novella.gather_rows"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @embed(%ids: tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?x64xf32> {
    %w = "novella.weight"() {name = "wte"} : () -> tensor<1000x64xf32>
    %0 = "novella.gather_rows"(%w, %ids) : (tensor<1000x64xf32>, tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?x64xf32>
    return %0 : tensor<1x?x64xf32>
  }
}

// -----

// The mean of RMSNorm over the last dim: ROWSUM into `part`, copied (first column tile)
// or added (later ones) into `acc`, scaled by 1/64 and stored on the last column tile.
// CHECK-LABEL: func.func @rms_mean
// CHECK: "novella.reduce"(%{{.*}}) {fn = "mean"} : ({{.*}}) -> tensor<1x?x1xf32, #{{.*}}>
// INST-LABEL: func.func @rms_mean
// INST: fn = "ROWSUM"
// INST: fn = "COPY"{{.*}}when = #{{.*}}
// INST: fn = "ADD"{{.*}}when = #{{.*}}
// INST: fn = "MUL", imm = 1.562500e-02 : f32
// INST: opcode = "STORE"{{.*}}when = #{{.*}}
// INST: kernel = "novella.reduce"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @rms_mean(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x1xf32> {
    %0 = "novella.reduce"(%x) {fn = "mean"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x1xf32>
    return %0 : tensor<1x?x1xf32>
  }
}

// -----

// rotate_half's cat on the last dim: each input's rows go to its own column range of the
// output rows (stride 16), the second one guarded to the column tiles inside its width.
// CHECK-LABEL: func.func @rotate_half
// CHECK: "novella.concat"(%{{.*}}, %{{.*}}) {dim = 3 : i64} : ({{.*}}) -> tensor<1x4x?x16xf32, #{{.*}}>
// INST-LABEL: func.func @rotate_half
// INST: opcode = "LOAD"
// INST: cols = 8 : i64, dram_base = #{{.*}}, dram_stride = 16 : i64, {{.*}}opcode = "STORE"
// INST: opcode = "LOAD"{{.*}}when = #{{.*}}
// INST: cols = 8 : i64, dram_base = #{{.*}}, dram_stride = 16 : i64, {{.*}}opcode = "STORE"{{.*}}when
// INST: kernel = "novella.concat"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @rotate_half(%a: tensor<1x4x?x8xf32, affine_map<()[s0] -> (1, 4, s0, 8)>>, %b: tensor<1x4x?x8xf32, affine_map<()[s0] -> (1, 4, s0, 8)>>) -> tensor<1x4x?x16xf32> {
    %0 = "novella.concat"(%a, %b) {dim = 3 : i64} : (tensor<1x4x?x8xf32, affine_map<()[s0] -> (1, 4, s0, 8)>>, tensor<1x4x?x8xf32, affine_map<()[s0] -> (1, 4, s0, 8)>>) -> tensor<1x4x?x16xf32>
    return %0 : tensor<1x4x?x16xf32>
  }
}

// -----

// GPT-2's qkv split: a slice of the last dim is a column range [64, 128) of each [192] row.
// CHECK-LABEL: func.func @split_last
// CHECK: "novella.slice"(%{{.*}}) {dim = 2 : i64, start = 64 : i64}
// INST-LABEL: func.func @split_last
// INST: cols = 64 : i64, dram_base = #{{.*}}, dram_stride = 192 : i64, {{.*}}opcode = "LOAD"
// INST: cols = 64 : i64, dram_base = #{{.*}}, dram_stride = 64 : i64, {{.*}}opcode = "STORE"
// INST: kernel = "novella.slice"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @split_last(%x: tensor<1x?x192xf32, affine_map<()[s0] -> (1, s0, 192)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>> {
    %0 = "novella.slice"(%x) {dim = 2 : i64, start = 64 : i64} : (tensor<1x?x192xf32, affine_map<()[s0] -> (1, s0, 192)>>) -> tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
    return %0 : tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>
  }
}

// -----

// x.select(1, -1) on a [2, T, 8] input: a negative start counts from the end, so the one row read
// starts at column (T - 1) * 8 of each [T * 8] row, an offset the JIT evaluates from T.
// CHECK-LABEL: func.func @last_position
// CHECK: "novella.slice"(%{{.*}}) {dim = 1 : i64, start = -1 : i64}
// INST-DAG: #[[OFF:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 8 + (s0 - 1) * 8)>
// INST-DAG: #[[ROW:.*]] = affine_map<(d0, d1)[s0] -> (s0 * 8)>
// INST-LABEL: func.func @last_position
// INST: "novella.inst"(%{{.*}}) {cols = 8 : i64, dram_base = #[[OFF]], dram_stride = #[[ROW]], {{.*}}opcode = "LOAD"
// INST: kernel = "novella.slice"
module attributes {novella.symbols = {s0 = ["T", 1, 1024]}} {
  func.func @last_position(%x: tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x1x8xf32> {
    %0 = "novella.slice"(%x) {dim = 1 : i64, start = -1 : i64} : (tensor<2x?x8xf32, affine_map<()[s0] -> (2, s0, 8)>>) -> tensor<2x1x8xf32>
    return %0 : tensor<2x1x8xf32>
  }
}

// -----

// x[-3:] along the outer `?` dim of a [T, 16] input: a row range whose first row is T - 3.
// CHECK-LABEL: func.func @last_rows
// CHECK: "novella.slice"(%{{.*}}) {dim = 0 : i64, start = -3 : i64}
// INST-DAG: #[[FIRST:.*]] = affine_map<(d0)[s0] -> ((s0 - 3) * 16)>
// INST-LABEL: func.func @last_rows
// INST: "novella.inst"(%{{.*}}) {cols = 16 : i64, dram_base = #[[FIRST]], {{.*}}opcode = "LOAD", row_bound = 3 : i64
// INST: kernel = "novella.slice"
module attributes {novella.symbols = {s0 = ["T", 3, 1024]}} {
  func.func @last_rows(%x: tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>) -> tensor<3x16xf32> {
    %0 = "novella.slice"(%x) {dim = 0 : i64, start = -3 : i64} : (tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>) -> tensor<3x16xf32>
    return %0 : tensor<3x16xf32>
  }
}

// -----

// A lookup in a table whose rows are the length (`mask[b, kv]`, aten.index.Tensor): the GATHER's
// row bound is the symbolic row count s0, so an index past the current length faults.
// CHECK-LABEL: func.func @lookup_length_rows
// CHECK: %[[G:.*]] = "novella.gather_rows"(%{{.*}}, %{{.*}}) : (tensor<?x1xf32, #{{.*}}>, tensor<1x?xf32, #{{.*}}>) -> tensor<1x?x1xf32, #{{.*}}>
// CHECK: return %[[G]]
// INST-DAG: #[[ROWS:.*]] = affine_map<(d0)[s0] -> (s0)>
// INST-LABEL: func.func @lookup_length_rows
// INST: "novella.inst"(%{{.*}}) {cols = 1 : i64, {{.*}}opcode = "GATHER", row_bound = #[[ROWS]]
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @lookup_length_rows(%t: tensor<?x1xf32, affine_map<()[s0] -> (s0, 1)>>, %i: tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?x1xf32> {
    %0 = "novella.gather_rows"(%t, %i) : (tensor<?x1xf32, affine_map<()[s0] -> (s0, 1)>>, tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?x1xf32>
    return %0 : tensor<1x?x1xf32>
  }
}

// -----

// Rows wider than a GATHER's cols field (5000 > 4095) are gathered 512 columns at a time: a second
// grid dim d1 of 10 column tiles, each GATHER and STORE starting at column d1 * 512 of rows 5000
// apart, the last tile 5000 - 9 * 512 = 392 wide.
// CHECK-LABEL: func.func @embed_wide
// CHECK: "novella.gather_rows"(%{{.*}}, %{{.*}}) : (tensor<10x5000xf32>, {{.*}}) -> tensor<1x?x5000xf32, #{{.*}}>
// INST-DAG: #[[C:.*]] = affine_map<(d0, d1)[s0] -> (512, d1 * -512 + 5000)>
// INST-DAG: #[[B:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 512)>
// INST-DAG: #[[G:.*]] = affine_map<()[s0] -> (s0 ceildiv 32, 10)>
// INST-LABEL: func.func @embed_wide
// INST: "novella.inst"(%{{.*}}) {cols = #[[C]], dram_base = #[[B]], dram_stride = 5000 : i64, {{.*}}opcode = "GATHER", row_bound = 10 : i64
// INST: "novella.inst"() {{{.*}}cols = #[[C]], {{.*}}fn = "COPY"
// INST: "novella.inst"() {cols = #[[C]], dram_base = #[[B]], dram_stride = 5000 : i64, {{.*}}opcode = "STORE"
// INST: grid = #[[G]], kernel = "novella.gather_rows"{{.*}}tiles = {tc = 512 : i64, tm = 32 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @embed_wide(%ids: tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?x5000xf32> {
    %w = "novella.weight"() {name = "wte"} : () -> tensor<10x5000xf32>
    %0 = "novella.gather_rows"(%w, %ids) : (tensor<10x5000xf32>, tensor<1x?xf32, affine_map<()[s0] -> (1, s0)>>) -> tensor<1x?x5000xf32>
    return %0 : tensor<1x?x5000xf32>
  }
}

// -----

// A pad of 15 before a length in [2, 65]: neither input is the wider at every length, so the column
// grid walks them in turn: step 0 copies the 15 columns, steps 1.. the length's tiles (column
// (d1 - 1) * 512 of the input, stored 15 columns further on), each under its own guard.
// INST-DAG: #[[B:.*]] = affine_map<(d0, d1)[s0] -> ((d1 - 1) * 512 + 15)>
// INST-DAG: #[[G:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 512 + 1)>
// INST-LABEL: func.func @pad_before
// INST: cols = 15 : i64, {{.*}}opcode = "LOAD"{{.*}}when =
// INST: opcode = "LOAD"{{.*}}tensor = 1 : i64, when =
// INST: dram_base = #[[B]], {{.*}}opcode = "STORE"{{.*}}when =
// INST: grid = #[[G]], kernel = "novella.concat"
module attributes {novella.symbols = {s0 = ["T", 2, 65]}} {
  func.func @pad_before(%a: tensor<1x8x15xf32>, %b: tensor<1x8x?xf32, affine_map<()[s0] -> (1, 8, s0)>>) -> tensor<1x8x?xf32> {
    %0 = "novella.concat"(%a, %b) {dim = 2 : i64} : (tensor<1x8x15xf32>, tensor<1x8x?xf32, affine_map<()[s0] -> (1, 8, s0)>>) -> tensor<1x8x?xf32>
    return %0 : tensor<1x8x?xf32>
  }
}
