// RUN: novella-opt %s --novella-shape-infer --split-input-file | FileCheck %s
// RUN: novella-opt %s --novella-shape-infer --novella-legalize --novella-allocate --novella-tile --novella-macro-gen --split-input-file | FileCheck %s --check-prefix=MACRO

// Splitting heads: a view (DRAM alias) then a transpose of dims 1 and 2 that keeps the
// last dim. The result `?` gets its size from the shape rule; the kernel loads each
// [64, 384] row tile with one DMA and stores head h at h * 64 * s0.
// CHECK-DAG: #[[HEADS:.*]] = affine_map<()[s0] -> (1, 6, s0, 64)>
// CHECK-LABEL: func.func @split_heads
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x384xf32, #{{.*}}>) -> tensor<1x6x?x64xf32, #[[HEADS]]>
// CHECK: %[[V:.*]] = "novella.reshape"(%[[X]])
// CHECK: %[[T:.*]] = "novella.transpose"(%[[V]]) {perm = array<i64: 0, 2, 1, 3>} : ({{.*}}) -> tensor<1x6x?x64xf32, #[[HEADS]]>
// CHECK: return %[[T]]
// MACRO-DAG: #[[H1:.*]] = affine_map<(d0)[s0] -> (s0 * 64)>
// MACRO-DAG: #[[H2:.*]] = affine_map<(d0)[s0] -> (s0 * 128)>
// MACRO-DAG: #[[H3:.*]] = affine_map<(d0)[s0] -> (s0 * 192)>
// MACRO-DAG: #[[H4:.*]] = affine_map<(d0)[s0] -> (s0 * 256)>
// MACRO-DAG: #[[H5:.*]] = affine_map<(d0)[s0] -> (s0 * 320)>
// MACRO-DAG: #[[ROW0:.*]] = affine_map<(d0)[s0] -> (d0 * 64)>
// MACRO-DAG: #[[ROWS:.*]] = affine_map<(d0)[s0] -> (64, d0 * -64 + s0)>
// MACRO-LABEL: func.func @split_heads
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t", cols = 384 : i64, dram_offset = 0 : i64, dram_stride = 384 : i64, {{.*}}row_start = #[[ROW0]], row_step = 1 : i64, rows = #[[ROWS]]
// MACRO: "novella.vop"() {a = "t", {{.*}}dst = "o", {{.*}}fn = "COPY", rows = #[[ROWS]]}
// Head h: SRAM columns [64h, 64h + 64) of the row tile go to DRAM offset h * 64 * s0.
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 0 : i64, buffer = "o", cols = 64 : i64, dram_offset = 0 : i64, dram_stride = 64 : i64, {{.*}}row_start = #[[ROW0]], row_step = 1 : i64, rows = #[[ROWS]], sram_stride = 384 : i64}
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 64 : i64, buffer = "o", cols = 64 : i64, dram_offset = #[[H1]], dram_stride = 64 : i64, {{.*}}rows = #[[ROWS]], sram_stride = 384 : i64}
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 128 : i64, buffer = "o", cols = 64 : i64, dram_offset = #[[H2]], dram_stride = 64 : i64, {{.*}}rows = #[[ROWS]], sram_stride = 384 : i64}
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 192 : i64, buffer = "o", cols = 64 : i64, dram_offset = #[[H3]], dram_stride = 64 : i64, {{.*}}rows = #[[ROWS]], sram_stride = 384 : i64}
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 256 : i64, buffer = "o", cols = 64 : i64, dram_offset = #[[H4]], dram_stride = 64 : i64, {{.*}}rows = #[[ROWS]], sram_stride = 384 : i64}
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 320 : i64, buffer = "o", cols = 64 : i64, dram_offset = #[[H5]], dram_stride = 64 : i64, {{.*}}rows = #[[ROWS]], sram_stride = 384 : i64}
// tm = 64: the largest of the row tiles 512, 256, 128, 64 whose two [tm, 384] buffers (t, o) fit the
// 64K-element SPAD (128 would need 98304 elements).
// MACRO: kernel = "novella.transpose"{{.*}}tiles = {tm = 64 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 1500]}} {
  func.func @split_heads(%x: tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>) -> tensor<1x6x?x64xf32> {
    %0 = "novella.reshape"(%x) : (tensor<1x?x384xf32, affine_map<()[s0] -> (1, s0, 384)>>) -> tensor<1x?x6x64xf32, affine_map<()[s0] -> (1, s0, 6, 64)>>
    %1 = "novella.transpose"(%0) {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x6x64xf32, affine_map<()[s0] -> (1, s0, 6, 64)>>) -> tensor<1x6x?x64xf32>
    return %1 : tensor<1x6x?x64xf32>
  }
}

// -----

// The positional table sliced to the post-conv length (a floordiv of the symbol): the
// slice's encoding carries the length; the add broadcasts [?, 32] over [1, ?, 32].
// CHECK-DAG: #[[N:.*]] = affine_map<()[s0] -> ((s0 - 1) floordiv 2 + 1, 32)>
// CHECK-LABEL: func.func @positions
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x32xf32, #[[XS:.*]]>)
// CHECK: %[[W:.*]] = "novella.weight"() {name = "table"}
// CHECK: %[[S:.*]] = "novella.slice"(%[[W]]) {dim = 0 : i64, start = 0 : i64} : (tensor<1500x32xf32>) -> tensor<?x32xf32, #[[N]]>
// CHECK: %[[A:.*]] = "novella.add"(%[[X]], %[[S]]) : ({{.*}}) -> tensor<1x?x32xf32, #[[XS]]>
// CHECK: return %[[A]]
// MACRO-LABEL: func.func @positions
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t", cols = 32 : i64, dram_offset = 0 : i64
// MACRO: kernel = "novella.slice"
// MACRO: "novella.vop"() {a = "t0", {{.*}}b = "t1", {{.*}}dst = "t2", {{.*}}fn = "ADD", rows
// MACRO: kernel = "novella.add"
module attributes {novella.symbols = {s0 = ["T", 2, 3000]}} {
  func.func @positions(%x: tensor<1x?x32xf32, affine_map<()[s0] -> (1, (s0 - 1) floordiv 2 + 1, 32)>>) -> tensor<1x?x32xf32> {
    %w = "novella.weight"() {name = "table"} : () -> tensor<1500x32xf32>
    %0 = "novella.slice"(%w) {dim = 0 : i64, start = 0 : i64} : (tensor<1500x32xf32>) -> tensor<?x32xf32, affine_map<()[s0] -> ((s0 - 1) floordiv 2 + 1, 32)>>
    %1 = "novella.add"(%x, %0) : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, (s0 - 1) floordiv 2 + 1, 32)>>, tensor<?x32xf32, affine_map<()[s0] -> ((s0 - 1) floordiv 2 + 1, 32)>>) -> tensor<1x?x32xf32>
    return %1 : tensor<1x?x32xf32>
  }
}

// -----

// Relative positions (Transformer-XL, wav2vec2-conformer): the 2T - 1 rows around the middle of a
// table, from the symbolic start 40 - T (an affine map of the symbols, which the JIT evaluates):
// the copy's load starts (40 - T) * 16 elements into the table.
// CHECK-DAG: #[[ST:.*]] = affine_map<()[s0] -> (-s0 + 40)>
// CHECK-LABEL: func.func @relative
// CHECK: "novella.slice"(%{{.*}}) {dim = 0 : i64, start = #[[ST]]} : (tensor<79x16xf32>) -> tensor<?x16xf32, #{{.*}}>
// MACRO-DAG: #[[OFF:.*]] = affine_map<(d0)[s0] -> ((-s0 + 40) * 16)>
// MACRO-LABEL: func.func @relative
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t", cols = 16 : i64, dram_offset = #[[OFF]]
// MACRO: kernel = "novella.slice"
module attributes {novella.symbols = {s0 = ["T", 1, 40]}} {
  func.func @relative(%x: tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>) -> tensor<?x16xf32> {
    %w = "novella.weight"() {name = "pe"} : () -> tensor<79x16xf32>
    %0 = "novella.slice"(%w) {dim = 0 : i64, start = affine_map<()[s0] -> (-s0 + 40)>} : (tensor<79x16xf32>) -> tensor<?x16xf32, affine_map<()[s0] -> (s0 * 2 - 1, 16)>>
    %1 = "novella.add"(%0, %0) : (tensor<?x16xf32, affine_map<()[s0] -> (s0 * 2 - 1, 16)>>, tensor<?x16xf32, affine_map<()[s0] -> (s0 * 2 - 1, 16)>>) -> tensor<?x16xf32>
    return %1 : tensor<?x16xf32>
  }
}

// -----

// Swapping the last two dims (a dynamic and a static one): a [128, 128] block loaded, transposed
// by the vector unit's TRANSPOSE (exact for inf and NaN) and stored transposed.
// CHECK-DAG: #[[KT:.*]] = affine_map<()[s0] -> (1, 6, 64, s0)>
// CHECK-LABEL: func.func @keys_t
// CHECK: "novella.transpose"({{.*}}) {perm = array<i64: 0, 1, 3, 2>} : ({{.*}}) -> tensor<1x6x64x?xf32, #[[KT]]>
// MACRO-LABEL: func.func @keys_t
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "x", cols = #[[C:[^,]*]], {{.*}}rows = #[[R:[^,]*]], sram_stride = 128 : i64
// MACRO-NEXT: "novella.vop"() {a = "x", a_stride = 128 : i64, cols = #[[C]], dst = "xt", dst_stride = 128 : i64, fn = "TRANSPOSE", rows = #[[R]]}
// MACRO-NEXT: "novella.dma_store"() {buffer = "xt", cols = #[[R]], {{.*}}rows = #[[C]], sram_stride = 128 : i64}
// MACRO-NOT: "novella.mma"
// MACRO: kernel = "novella.transpose"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @keys_t(%k: tensor<1x6x?x64xf32, affine_map<()[s0] -> (1, 6, s0, 64)>>) -> tensor<1x6x64x?xf32> {
    %0 = "novella.transpose"(%k) {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x6x?x64xf32, affine_map<()[s0] -> (1, 6, s0, 64)>>) -> tensor<1x6x64x?xf32>
    return %0 : tensor<1x6x64x?xf32>
  }
}

// -----

// Broadcasting: a [16] row on the left of a non-commutative op is materialized with a
// repeated-row LOAD (row_step 0); a [1, ?, 1] column on the right uses VEC COL mode.
// CHECK-LABEL: func.func @broadcasts
// CHECK: %[[D:.*]] = "novella.sub"(%{{.*}}, %{{.*}}) : (tensor<16xf32>, {{.*}}) -> tensor<1x?x16xf32, #[[R:.*]]>
// CHECK: "novella.mul"(%[[D]], %{{.*}}) : ({{.*}}) -> tensor<1x?x16xf32, #[[R]]>
// MACRO-LABEL: func.func @broadcasts
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t0", {{.*}}row_bound = 1 : i64, row_start = 0 : i64, row_step = 0 : i64
// MACRO: fn = "SUB", rows
// MACRO: "novella.dma_load"(%{{.*}}) {buffer = "t1", cols = 1 : i64
// MACRO: "novella.vop"() {a = "t0", a_stride = 16 : i64, b = "t1", b_stride = 1 : i64, {{.*}}fn = "MUL", mode = "COL"
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @broadcasts(%x: tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>, %c: tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x16xf32> {
    %r = "novella.weight"() {name = "row"} : () -> tensor<16xf32>
    %0 = "novella.sub"(%r, %x) : (tensor<16xf32>, tensor<1x?x16xf32, affine_map<()[s0] -> (1, s0, 16)>>) -> tensor<1x?x16xf32>
    %1 = "novella.mul"(%0, %c) : (tensor<1x?x16xf32>, tensor<1x?x1xf32, affine_map<()[s0] -> (1, s0, 1)>>) -> tensor<1x?x16xf32>
    return %1 : tensor<1x?x16xf32>
  }
}

// -----

// A transpose that keeps a dynamic last dim: rows of s0 elements are moved in column chunks of
// 256 (the second grid dim, the last chunk partial); each of the 3 unit blocks is its own DMA.
// MACRO-DAG: #[[COLS:.*]] = affine_map<(d0, d1)[s0] -> (256, d1 * -256 + s0)>
// MACRO-DAG: #[[CHUNK:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 256)>
// MACRO-DAG: #[[UNIT1:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 256 + s0 * 4)>
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 256)>
// MACRO-LABEL: func.func @keep_dynamic_last
// MACRO: "novella.dma_load"(%{{.*}}) {buf_offset = 0 : i64, buffer = "t", cols = #[[COLS]], dram_offset = #[[CHUNK]]
// MACRO-NEXT: "novella.dma_load"(%{{.*}}) {buf_offset = 256 : i64, buffer = "t", cols = #[[COLS]], dram_offset = #[[UNIT1]]
// MACRO: "novella.vop"() {a = "t", {{.*}}cols = 768 : i64, dst = "o", {{.*}}fn = "COPY"
// MACRO: "novella.dma_store"() {buf_offset = 0 : i64, buffer = "o", cols = #[[COLS]], dram_offset = #[[CHUNK]]
// MACRO: grid = #[[GRID]], kernel = "novella.transpose"{{.*}}tiles = {tc = 256 : i64, tm = 32 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @keep_dynamic_last(%x: tensor<3x4x?xf32, affine_map<()[s0] -> (3, 4, s0)>>) -> tensor<4x3x?xf32> {
    %0 = "novella.transpose"(%x) {perm = array<i64: 1, 0, 2>} : (tensor<3x4x?xf32, affine_map<()[s0] -> (3, 4, s0)>>) -> tensor<4x3x?xf32>
    return %0 : tensor<4x3x?xf32>
  }
}

// -----

// Two dynamic dims: a relative-position bias [q, heads, k] -> [heads, q, k] (q = k = T). The
// rows of q are the first grid dim, column chunks of k the second; head h goes to h * s0 * s0.
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> (s0 ceildiv 32, s0 ceildiv 256)>
// MACRO-DAG: #[[CHUNK:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 256)>
// MACRO-DAG: #[[HEAD1:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 256 + s0 * s0)>
// MACRO-DAG: #[[HEAD3:.*]] = affine_map<(d0, d1)[s0] -> (d1 * 256 + (s0 * s0) * 3)>
// MACRO-LABEL: func.func @rel_bias
// MACRO: "novella.dma_load"(%{{.*}}) {buf_offset = 0 : i64, buffer = "t", {{.*}}dram_offset = #[[CHUNK]]
// MACRO-COUNT-3: "novella.dma_load"
// MACRO: "novella.vop"() {{{.*}}fn = "COPY"
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 0 : i64, buffer = "o", {{.*}}dram_offset = #[[CHUNK]]
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 256 : i64, buffer = "o", {{.*}}dram_offset = #[[HEAD1]]
// MACRO-NEXT: "novella.dma_store"
// MACRO-NEXT: "novella.dma_store"() {buf_offset = 768 : i64, buffer = "o", {{.*}}dram_offset = #[[HEAD3]]
// MACRO: grid = #[[GRID]], kernel = "novella.transpose"{{.*}}tiles = {tc = 256 : i64, tm = 32 : i64}
module attributes {novella.symbols = {s0 = ["T", 1, 512]}} {
  func.func @rel_bias(%b: tensor<?x4x?xf32, affine_map<()[s0] -> (s0, 4, s0)>>) -> tensor<4x?x?xf32> {
    %0 = "novella.transpose"(%b) {perm = array<i64: 1, 0, 2>} : (tensor<?x4x?xf32, affine_map<()[s0] -> (s0, 4, s0)>>) -> tensor<4x?x?xf32>
    return %0 : tensor<4x?x?xf32>
  }
}

// -----

// A step slice `x[..., 1::2]` of a `?`-long [1, T, 64] (what the frontend makes of aten.slice with a
// step, frontend/lowering/strided.py): the dim viewed as [32, 2] (a DRAM alias) and column 1 taken,
// one strided copy: each of the T * 32 rows is 1 element read at stride 2 from offset 1, the last
// row tile partial.
// CHECK-LABEL: func.func @odd_columns
// CHECK: %[[G:.*]] = "novella.reshape"(%{{.*}}) : ({{.*}}) -> tensor<1x?x32x2xf32, #{{.*}}>
// CHECK: %[[C:.*]] = "novella.slice"(%[[G]]) {dim = 3 : i64, start = 1 : i64}
// CHECK: "novella.reshape"(%[[C]])
// MACRO-DAG: #[[FROM:.*]] = affine_map<(d0, d1)[s0] -> (d1 + 1)>
// MACRO-DAG: #[[ROWS:.*]] = affine_map<(d0, d1)[s0] -> (64, d0 * -64 + s0 * 32)>
// MACRO-DAG: #[[GRID:.*]] = affine_map<()[s0] -> ((s0 * 32) ceildiv 64, 1)>
// MACRO-LABEL: func.func @odd_columns
// MACRO: %[[G:.*]] = "novella.reshape"
// MACRO: "novella.dma_load"(%[[G]]) {buffer = "b0", cols = 1 : i64, dram_offset = #[[FROM]], dram_stride = 2 : i64, {{.*}}rows = #[[ROWS]]
// MACRO: "novella.dma_store"() {buffer = "b1", cols = 1 : i64, {{.*}}dram_stride = 1 : i64
// MACRO: grid = #[[GRID]], kernel = "novella.slice"
module attributes {novella.symbols = {s0 = ["T", 1, 300]}} {
  func.func @odd_columns(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {
    %g = "novella.reshape"(%x) : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32x2xf32, affine_map<()[s0] -> (1, s0, 32, 2)>>
    %c = "novella.slice"(%g) {dim = 3 : i64, start = 1 : i64} : (tensor<1x?x32x2xf32, affine_map<()[s0] -> (1, s0, 32, 2)>>) -> tensor<1x?x32x1xf32, affine_map<()[s0] -> (1, s0, 32, 1)>>
    %r = "novella.reshape"(%c) : (tensor<1x?x32x1xf32, affine_map<()[s0] -> (1, s0, 32, 1)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %r : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }
}
