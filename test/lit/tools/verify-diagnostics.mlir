// --verify-diagnostics itself: wrong or missing expectations fail, like mlir-opt.
// RUN: not novella-opt %s --split-input-file --verify-diagnostics 2>&1 | FileCheck %s

// CHECK: verify-diagnostics.mlir:[[# @LINE + 4]]:8: error: unexpected error: 'novella.relu' op result tensor<4x32xf32> must have the operand's shape
// CHECK: verify-diagnostics.mlir:[[# @LINE + 2]]:6: error: expected error "a different message" was not produced
func.func @wrong(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  // expected-error @below {{a different message}}
  %0 = "novella.relu"(%x) : (tensor<4x64xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}

// -----

// A chunk that verifies produces no error, so its expectation is reported.
// CHECK: verify-diagnostics.mlir:[[# @LINE + 1]]:4: error: expected error "never emitted" was not produced
// expected-error @+1 {{never emitted}}
func.func @fine() { return }

// -----

// Matched expectations (substring, and -re with {{regex}}) are silent.
// CHECK-NOT: verify-diagnostics.mlir:[[# @LINE + 3]]
func.func @matched(%x: tensor<4x64xf32>) -> tensor<4x32xf32> {
  // expected-error-re @+1 {{'novella.relu' op result tensor<4x{{[0-9]+}}xf32> must have}}
  %0 = "novella.relu"(%x) : (tensor<4x64xf32>) -> tensor<4x32xf32>
  return %0 : tensor<4x32xf32>
}
