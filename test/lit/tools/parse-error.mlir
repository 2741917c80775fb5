// RUN: not novella-opt %s 2>&1 | FileCheck %s
// RUN: not novella-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=SPLIT

// A parse error is a diagnostic at the file's line and column, with the
// source line and a caret, never a traceback.
// CHECK: parse-error.mlir:[[# @LINE + 4]]:14: error: expected non-function type
// CHECK-NEXT: {{^}}func.func @f( {
// CHECK-NEXT: {{^}}             ^
// CHECK-NOT: Traceback
func.func @f( {

// -----

// Split chunks keep the line numbers of the file.
// SPLIT: parse-error.mlir:10:14: error: expected non-function type
// SPLIT: parse-error.mlir:[[# @LINE + 1]]:8: error: custom op 'novella.nonsense' is unknown
  %0 = novella.nonsense
