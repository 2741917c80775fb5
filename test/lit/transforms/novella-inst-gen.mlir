// RUN: novella-opt %s --novella-inst-gen --split-input-file --verify-diagnostics | FileCheck %s

// Tile ops become ISA templates: buffer names become SRAM addresses (w at
// 0, a at 2048, bias at 6144, out at 6176; acc in the accumulator, mem 1),
// DRAM addresses stay relative to the operand `tensor`, and the fields that
// depend on the grid point or on T stay affine maps for the JIT.
// CHECK-DAG: #[[$KOFF:.*]] = affine_map<(d0, d1, d2)[s0] -> (d2 * 64)>
// CHECK-DAG: #[[$BOUND:.*]] = affine_map<(d0, d1, d2)[s0] -> (s0)>
// CHECK-DAG: #[[$ROW0:.*]] = affine_map<(d0, d1, d2)[s0] -> (d1 * 64)>
// CHECK-DAG: #[[$ROWS:.*]] = affine_map<(d0, d1, d2)[s0] -> (64, d1 * -64 + s0)>
// CHECK-DAG: #[[$FIRST:.*]] = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 == 0)>
// CHECK-DAG: #[[$LASTK:.*]] = affine_set<(d0, d1, d2)[s0] : (-d2 == 0)>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<1x?x64xf32
// CHECK: %[[W:.*]] = "novella.weight"
// CHECK: %[[B:.*]] = "novella.weight"
// CHECK: "novella.macro"() ({
// CHECK-NEXT: "novella.inst"(%[[W]]) {{.*}}mem = 0 : i64, opcode = "LOAD", {{.*}}rows = 32 : i64, sram_addr = 0 : i64, sram_stride = 64 : i64, tensor = 1 : i64, when = #[[$FIRST]]}
// CHECK-NEXT: "novella.inst"(%[[B]]) {{.*}}opcode = "LOAD", {{.*}}sram_addr = 6144 : i64, {{.*}}tensor = 2 : i64, when = #[[$FIRST]]}
// CHECK-NEXT: "novella.inst"(%[[X]]) {cols = 64 : i64, dram_base = #[[$KOFF]], dram_stride = 64 : i64, mem = 0 : i64, opcode = "LOAD", row_bound = #[[$BOUND]], row_start = #[[$ROW0]], row_step = 1 : i64, rows = #[[$ROWS]], sram_addr = 2048 : i64, sram_stride = 64 : i64, tensor = 0 : i64}
// CHECK-NEXT: "novella.inst"() {a_addr = 2048 : i64, a_stride = 64 : i64, acc_addr = 0 : i64, acc_stride = 32 : i64, {{.*}}b_addr = #[[$KOFF]], b_stride = 64 : i64, k = 64 : i64, m = #[[$ROWS]], n = 32 : i64, opcode = "MATMUL", transpose_b = 1 : i64}
// CHECK-NEXT: "novella.inst"() {a_addr = 0 : i64, a_mem = 1 : i64, {{.*}}b_addr = 6144 : i64, b_mem = 0 : i64, {{.*}}dst_addr = 6176 : i64, dst_mem = 0 : i64, {{.*}}fn = "ADD", mode = "ROW", opcode = "VEC", rows = #[[$ROWS]], when = #[[$LASTK]]}
// CHECK-NEXT: "novella.inst"() {a_addr = 6176 : i64, {{.*}}fn = "RELU", {{.*}}opcode = "VEC", rows = #[[$ROWS]], when = #[[$LASTK]]}
// CHECK-NEXT: "novella.inst"() {{.*}}opcode = "STORE", row_bound = #[[$BOUND]], row_start = #[[$ROW0]], {{.*}}rows = #[[$ROWS]], sram_addr = 6176 : i64, {{.*}}when = #[[$LASTK]]}
// CHECK-NEXT: }) {buffers = {a = ["spad", 2048, 4096], {{.*}}}, dram = #{{.*}}, grid = #{{.*}}, kernel = "novella.linear", schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tk = 64 : i64
// CHECK-NOT: "novella.dma_load"
#map = affine_map<()[s0] -> (1, s0, 64)>
#map1 = affine_map<()[s0] -> (1, s0, 32)>
#map2 = affine_map<()[s0] -> (s0 * 96 + 2080)>
#map3 = affine_map<()[s0] -> (0)>
#map4 = affine_map<()[s0] -> (2048)>
#map5 = affine_map<(d0, d1, d2)[s0] -> (d0 * 2048)>
#map6 = affine_map<(d0, d1, d2)[s0] -> (d0 * 32)>
#map7 = affine_map<(d0, d1, d2)[s0] -> (d2 * 64)>
#map8 = affine_map<(d0, d1, d2)[s0] -> (s0)>
#map9 = affine_map<(d0, d1, d2)[s0] -> (d1 * 64)>
#map10 = affine_map<(d0, d1, d2)[s0] -> (64, d1 * -64 + s0)>
#map11 = affine_map<(d0, d1, d2)[s0] -> (d2, 1)>
#map12 = affine_map<()[s0] -> (1, s0 ceildiv 64, 1)>
#map13 = affine_map<()[s0] -> (s0 * 64 + 2080)>
#set = affine_set<(d0, d1, d2)[s0] : (d1 == 0, d2 == 0)>
#set1 = affine_set<(d0, d1, d2)[s0] : (-d2 == 0)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @linear(%arg0: tensor<1x?x64xf32, #map> {novella.dram = affine_map<()[s0] -> (2080)>}) -> tensor<1x?x32xf32, #map1> attributes {novella.dram_size = #map2} {
    %0 = "novella.weight"() {name = "w", novella.dram = #map3} : () -> tensor<32x64xf32>
    %1 = "novella.weight"() {name = "b", novella.dram = #map4} : () -> tensor<32xf32>
    %2 = "novella.macro"() ({
      "novella.dma_load"(%0) {buffer = "w", cols = 64 : i64, dram_offset = #map5, dram_stride = 64 : i64, row_bound = 32 : i64, row_start = 0 : i64, row_step = 1 : i64, rows = 32 : i64, sram_stride = 64 : i64, tensor = 1 : i64, when = #set} : (tensor<32x64xf32>) -> ()
      "novella.dma_load"(%1) {buffer = "bias", cols = 32 : i64, dram_offset = #map6, dram_stride = 32 : i64, row_bound = 1 : i64, row_start = 0 : i64, row_step = 1 : i64, rows = 1 : i64, sram_stride = 32 : i64, tensor = 2 : i64, when = #set} : (tensor<32xf32>) -> ()
      "novella.dma_load"(%arg0) {buffer = "a", cols = 64 : i64, dram_offset = #map7, dram_stride = 64 : i64, row_bound = #map8, row_start = #map9, row_step = 1 : i64, rows = #map10, sram_stride = 64 : i64, tensor = 0 : i64} : (tensor<1x?x64xf32, #map>) -> ()
      "novella.mma"() {a_stride = 64 : i64, acc = "acc", acc_stride = 32 : i64, accumulate = #map11, b_stride = 64 : i64, k = 64 : i64, lhs = "a", m = #map10, n = 32 : i64, rhs = "w", rhs_offset = #map7, transpose_b = 1 : i64} : () -> ()
      "novella.vop"() {a = "acc", a_stride = 32 : i64, b = "bias", b_stride = 32 : i64, cols = 32 : i64, dst = "out", dst_stride = 32 : i64, fn = "ADD", mode = "ROW", rows = #map10, when = #set1} : () -> ()
      "novella.vop"() {a = "out", a_stride = 32 : i64, b_stride = 32 : i64, cols = 32 : i64, dst = "out", dst_stride = 32 : i64, fn = "RELU", rows = #map10, when = #set1} : () -> ()
      "novella.dma_store"() {buffer = "out", cols = 32 : i64, dram_offset = #map6, dram_stride = 32 : i64, row_bound = #map8, row_start = #map9, row_step = 1 : i64, rows = #map10, sram_stride = 32 : i64, when = #set1} : () -> ()
    }) {grid = #map12, kernel = "novella.linear", buffers = {a = ["spad", 2048, 4096], acc = ["acc", 0, 2048], bias = ["spad", 6144, 32], out = ["spad", 6176, 2048], w = ["spad", 0, 2048]}, dram = #map13, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tk = 64 : i64, tm = 64 : i64, tn = 32 : i64}} : () -> tensor<1x?x32xf32, #map1>
    return %2 : tensor<1x?x32xf32, #map1>
  }
}

// -----

// The broadcast row sits in buffer t1 at 4096; the STORE has no operand:
// it writes the macro's result.
// CHECK-LABEL: func.func @add_row
// CHECK-SAME: (%[[A:.*]]: tensor<?x64xf32, {{.*}}, %[[B:.*]]: tensor<64xf32>
// CHECK: "novella.inst"(%[[A]]) {{.*}}opcode = "LOAD", {{.*}}sram_addr = 0 : i64, {{.*}}tensor = 0 : i64}
// CHECK-NEXT: "novella.inst"(%[[B]]) {{.*}}opcode = "LOAD", {{.*}}sram_addr = 4096 : i64, {{.*}}tensor = 1 : i64, when
// CHECK-NEXT: "novella.inst"() {a_addr = 0 : i64, {{.*}}b_addr = 4096 : i64, {{.*}}fn = "ADD", mode = "ROW", opcode = "VEC"
// CHECK-NEXT: "novella.inst"() {{.*}}opcode = "STORE", {{.*}}sram_addr = 0 : i64, sram_stride = 64 : i64} : () -> ()
#map = affine_map<()[s0] -> (s0, 64)>
#map1 = affine_map<()[s0] -> (s0 * 128 + 64)>
#map2 = affine_map<(d0)[s0] -> (s0)>
#map3 = affine_map<(d0)[s0] -> (d0 * 64)>
#map4 = affine_map<(d0)[s0] -> (64, d0 * -64 + s0)>
#map5 = affine_map<()[s0] -> (s0 ceildiv 64)>
#map6 = affine_map<()[s0] -> (s0 * 64 + 64)>
#set = affine_set<(d0)[s0] : (d0 == 0)>
module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @add_row(%arg0: tensor<?x64xf32, #map> {novella.dram = affine_map<()[s0] -> (0)>}, %arg1: tensor<64xf32> {novella.dram = affine_map<()[s0] -> (s0 * 64)>}) -> tensor<?x64xf32, #map> attributes {novella.dram_size = #map1} {
    %0 = "novella.macro"() ({
      "novella.dma_load"(%arg0) {buffer = "t0", cols = 64 : i64, dram_offset = 0 : i64, dram_stride = 64 : i64, row_bound = #map2, row_start = #map3, row_step = 1 : i64, rows = #map4, sram_stride = 64 : i64, tensor = 0 : i64} : (tensor<?x64xf32, #map>) -> ()
      "novella.dma_load"(%arg1) {buffer = "t1", cols = 64 : i64, dram_offset = 0 : i64, dram_stride = 64 : i64, row_bound = 1 : i64, row_start = 0 : i64, row_step = 1 : i64, rows = 1 : i64, sram_stride = 64 : i64, tensor = 1 : i64, when = #set} : (tensor<64xf32>) -> ()
      "novella.vop"() {a = "t0", a_stride = 64 : i64, b = "t1", b_stride = 64 : i64, cols = 64 : i64, dst = "t0", dst_stride = 64 : i64, fn = "ADD", mode = "ROW", rows = #map4} : () -> ()
      "novella.dma_store"() {buffer = "t0", cols = 64 : i64, dram_offset = 0 : i64, dram_stride = 64 : i64, row_bound = #map2, row_start = #map3, row_step = 1 : i64, rows = #map4, sram_stride = 64 : i64} : () -> ()
    }) {grid = #map5, kernel = "novella.add", buffers = {t0 = ["spad", 0, 4096], t1 = ["spad", 4096, 4096]}, dram = #map6, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tm = 64 : i64}} : () -> tensor<?x64xf32, #map>
    return %0 : tensor<?x64xf32, #map>
  }
}

// -----

// A buffer offset that alternates with the grid step (double buffering) is
// added to the buffer's base: sram_addr = (d0 mod 2) * 256 + 1024.
// CHECK-DAG: #[[$ADDR:.*]] = affine_map<(d0)[s0] -> ((d0 mod 2) * 256 + 1024)>
// CHECK-DAG: #[[$ROWS:.*]] = affine_map<(d0)[s0] -> (16, d0 * -16 + s0)>
// CHECK-LABEL: func.func @shifted
// CHECK: "novella.inst"(%{{.*}}) {{.*}}opcode = "LOAD", {{.*}}rows = #[[$ROWS]], sram_addr = #[[$ADDR]],
// CHECK-NEXT: "novella.inst"() {a_addr = #[[$ADDR]], {{.*}}dst_addr = #[[$ADDR]], {{.*}}fn = "EXP"
// CHECK-NEXT: "novella.inst"() {{.*}}opcode = "STORE", {{.*}}sram_addr = #[[$ADDR]],
#rows = affine_map<(d0)[s0] -> (16, d0 * -16 + s0)>
module attributes {novella.symbols = {s0 = ["T", 1, 256]}} {
  func.func @shifted(%x: tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {novella.dram = affine_map<()[s0] -> (0)>}) -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {
    %0 = "novella.macro"() ({
      "novella.dma_load"(%x) {buffer = "in", tensor = 0 : i64, dram_offset = 0 : i64, dram_stride = 16 : i64, row_start = affine_map<(d0)[s0] -> (d0 * 16)>, row_step = 1 : i64, row_bound = affine_map<(d0)[s0] -> (s0)>, rows = #rows, cols = 16 : i64, sram_stride = 16 : i64, buf_offset = affine_map<(d0)[s0] -> ((d0 mod 2) * 256)>} : (tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>) -> ()
      "novella.vop"() {fn = "EXP", dst = "in", a = "in", rows = #rows, cols = 16 : i64, dst_stride = 16 : i64, a_stride = 16 : i64, dst_offset = affine_map<(d0)[s0] -> ((d0 mod 2) * 256)>, a_offset = affine_map<(d0)[s0] -> ((d0 mod 2) * 256)>} : () -> ()
      "novella.dma_store"() {buffer = "in", dram_offset = 0 : i64, dram_stride = 16 : i64, row_start = affine_map<(d0)[s0] -> (d0 * 16)>, row_step = 1 : i64, row_bound = affine_map<(d0)[s0] -> (s0)>, rows = #rows, cols = 16 : i64, sram_stride = 16 : i64, buf_offset = affine_map<(d0)[s0] -> ((d0 mod 2) * 256)>} : () -> ()
    }) {kernel = "novella.exp", grid = affine_map<()[s0] -> (s0 ceildiv 16)>, buffers = {scratch = ["spad", 0, 1024], in = ["spad", 1024, 512]}, dram = affine_map<()[s0] -> (s0 * 16)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tm = 16 : i64}} : () -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
    return %0 : tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
  }
}

// -----

// Constant fields are range-checked against the ISA field widths now.
module attributes {novella.symbols = {s0 = ["T", 1, 8192]}} {
  func.func @too_many_rows(%x: tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {novella.dram = affine_map<()[s0] -> (0)>}) -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {
    // expected-error @+1 {{LOAD.rows = 5000 does not fit its 12-bit field [0, 4095]}}
    %0 = "novella.macro"() ({
      "novella.dma_load"(%x) {buffer = "in", tensor = 0 : i64, dram_offset = 0 : i64, dram_stride = 16 : i64, row_start = 0 : i64, row_step = 1 : i64, row_bound = 5000 : i64, rows = 5000 : i64, cols = 16 : i64, sram_stride = 16 : i64} : (tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>) -> ()
      "novella.vop"() {fn = "RELU", dst = "in", a = "in", rows = 5000 : i64, cols = 16 : i64} : () -> ()
    }) {kernel = "novella.relu", grid = affine_map<()[s0] -> (1)>, buffers = {in = ["spad", 0, 80000]}, dram = affine_map<()[s0] -> (s0 * 16)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tm = 5000 : i64}} : () -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
    return %0 : tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
  }
}

// -----

// Tile ops must name buffers of the macro's declared `buffers` (the tile op's verifier).
module attributes {novella.symbols = {s0 = ["T", 1, 8192]}} {
  func.func @unknown_buffer(%x: tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {novella.dram = affine_map<()[s0] -> (0)>}) -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>> {
    %0 = "novella.macro"() ({
      // expected-error @+1 {{'novella.vop' op 'dst' = "tmp" is not a buffer of the macro (in)}}
      "novella.vop"() {fn = "RELU", dst = "tmp", a = "in", rows = 16 : i64, cols = 16 : i64} : () -> ()
    }) {kernel = "novella.relu", grid = affine_map<()[s0] -> (1)>, buffers = {in = ["spad", 0, 256]}, dram = affine_map<()[s0] -> (s0 * 16)>, schedule = {load_slots = 1 : i64, store_slots = 1 : i64}, tiles = {tm = 16 : i64}} : () -> tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
    return %0 : tensor<?x16xf32, affine_map<()[s0] -> (s0, 16)>>
  }
}
