// RUN: novella-opt %S/Inputs/linear.mlir -p 'builtin.module(novella-legalize,novella-allocate,novella-tile{tile-m=32})' --mlir-print-ir-after-all -o %t 2>&1 | FileCheck %s
// RUN: FileCheck %s --check-prefix=OUT < %t

// Like mlir-opt: one header per pass (its name, then its argument with the
// options), followed by the whole module after that pass, on stderr.
// CHECK: // -----// IR Dump After NovellaLegalize: novella-legalize{fuse-attention=1 fuse-residual=1 fuse-norm=1} //----- //
// CHECK-NEXT: #map
// CHECK: module attributes {novella.symbols = {s0 = ["T", 1, 2048]}}
// CHECK: "novella.linear"{{.*}}{act = "relu"}
// CHECK-NOT: novella.dram
// CHECK: // -----// IR Dump After NovellaAllocate: novella-allocate{fixed-offsets=0} //----- //
// CHECK: novella.dram
// CHECK-NOT: novella.tiles
// CHECK: // -----// IR Dump After NovellaTile: novella-tile{tile-m=32 slots=2} //----- //
// CHECK: novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 32 : i64, tn = 32 : i64, ws = 1 : i64}
// CHECK-NOT: IR Dump

// The final module still goes to the output file.
// OUT: novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 32 : i64, tn = 32 : i64, ws = 1 : i64}

// RUN: novella-opt %S/Inputs/linear.mlir --novella-legalize --novella-shape-infer --mlir-print-ir-after-change -o %t 2>&1 | FileCheck %s --check-prefix=CHANGE
// CHANGE: IR Dump After NovellaLegalize: novella-legalize
// CHANGE-NOT: IR Dump After NovellaShapeInfer

// RUN: novella-opt %S/Inputs/linear.mlir --novella-legalize --mlir-print-ir-before-all -o %t 2>&1 | FileCheck %s --check-prefix=BEFORE
// BEFORE: // -----// IR Dump Before NovellaLegalize: novella-legalize{fuse-attention=1 fuse-residual=1 fuse-norm=1} //----- //
// BEFORE: "novella.relu"
