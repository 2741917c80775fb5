// A textual pipeline with pass options, the same passes as flags, and
// upstream MLIR passes in the same pipeline all give the same tiling.
// RUN: novella-opt %S/Inputs/linear.mlir -p 'builtin.module(novella-legalize,novella-allocate,novella-tile{tile-m=32})' | FileCheck %s
// RUN: novella-opt %S/Inputs/linear.mlir --novella-legalize --novella-allocate --novella-tile=tile-m=32 | FileCheck %s
// RUN: novella-opt %S/Inputs/linear.mlir --novella-legalize --novella-allocate --novella-tile="tile-m=32" | FileCheck %s
// RUN: novella-opt %S/Inputs/linear.mlir -p 'builtin.module(novella-legalize, canonicalize, novella-allocate, novella-tile{tile-m=32}, cse)' | FileCheck %s
// RUN: novella-opt -p 'novella-legalize,novella-allocate,novella-tile{tile-m="32"}' < %S/Inputs/linear.mlir | FileCheck %s

// CHECK-DAG: #[[$GRID:.*]] = affine_map<()[s0] -> (1, s0 ceildiv 32, 1)>
// CHECK-LABEL: func.func @linear
// CHECK: "novella.linear"({{.*}}) {act = "relu", {{.*}}novella.grid = #[[$GRID]], {{.*}}novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 32 : i64, tn = 32 : i64, ws = 1 : i64}}
// CHECK-NOT: novella.relu

// The default tiles and loop order are the cost model's pick within the SRAM budget of the config
// (ws = 1: the 32x64 weight is resident, x streams through two slots).
// RUN: novella-opt %S/Inputs/linear.mlir -p 'builtin.module(novella-allocate,novella-tile)' | FileCheck %s --check-prefix=DEFAULT
// RUN: novella-opt %S/Inputs/linear.mlir -p 'builtin.module(novella-allocate,novella-tile)' --config %S/Inputs/small-sram.toml | FileCheck %s --check-prefix=SMALL
// DEFAULT: novella.tiles = {acc_slots = 2 : i64, tk = 64 : i64, tm = 16 : i64, tn = 32 : i64, ws = 1 : i64}
// SMALL: novella.sram_budget = {acc = 1024 : i64, spad = 4096 : i64}, novella.tiles = {tk = 64 : i64, tm = 16 : i64, tn = 16 : i64, ws = 1 : i64}

// A config too small for any tile makes the pass fail on the op.
// RUN: not novella-opt %S/Inputs/linear.mlir --novella-allocate --novella-tile --config %S/Inputs/tiny-sram.toml 2>&1 | FileCheck %s --check-prefix=TINY
// TINY: linear.mlir:5:10: error: 'novella.linear' op {{.*}}does not fit the SRAM of this config (spad {{[0-9]+}} of 1024 elements
