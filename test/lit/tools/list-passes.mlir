// RUN: novella-opt --list-passes | FileCheck %s
// RUN: novella-opt --help | FileCheck %s --check-prefixes=CHECK,HELP

// HELP: usage: novella-opt
// HELP: -p PASS_PIPELINE, --pass-pipeline PASS_PIPELINE
// HELP: --verify-diagnostics
// HELP: --mlir-print-ir-after-all
// CHECK: --novella-shape-infer
// CHECK-NEXT: gives every `?` dim of every tensor its symbolic size
// CHECK: --novella-legalize
// CHECK-NEXT: rewrites the tensor ops
// CHECK: --novella-allocate
// CHECK-NEXT: DRAM placement
// CHECK: --novella-tile
// CHECK-NEXT: tile sizes
// CHECK-NEXT: tile-m=<int> {{.*}}(default: 0)
// CHECK: --novella-macro-gen
// CHECK-NEXT: novella.macro
// CHECK: --novella-inst-gen
// CHECK-NEXT: novella.inst
