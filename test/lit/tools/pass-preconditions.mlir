// RUN: novella-opt %s --split-input-file --verify-diagnostics --novella-tile
// RUN: novella-opt %s --split-input-file --verify-diagnostics --novella-tile --novella-inst-gen

// Each pass refuses IR of the wrong stage and names the pass that produces its input.
module attributes {novella.symbols = {s0 = ["T", 1, 256]}} {
  func.func @unallocated(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>> {
    // expected-error @+1 {{'novella.relu' op has no 'novella.sram_budget' attribute: --novella-tile expects the output of --novella-allocate; run it first}}
    %0 = "novella.relu"(%x) : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
    return %0 : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  }
}

// -----

// Symbol bounds must satisfy 0 <= min <= max < 2^24.
// expected-error @+1 {{symbol s0 ('T') has bounds [300, 2]}}
module attributes {novella.symbols = {s0 = ["T", 300, 2]}} {
  func.func @bounds(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>> {
    return %x : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  }
}

// -----

// A type may only use declared symbols.
module attributes {novella.symbols = {s0 = ["T", 1, 256]}} {
  // expected-error @+1 {{uses symbol s1, but novella.symbols declares s0}}
  func.func @undeclared(%x: tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>) -> tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>> {
    return %x : tensor<?x64xf32, affine_map<()[s0, s1] -> (s1, 64)>>
  }
}

// -----

// The `novella.*` attributes a pass leaves are the declared ones (dialects/discardable.py), in
// their place and of their kind: a misspelt or mistyped annotation is refused after the pass.
module attributes {novella.symbols = {s0 = ["T", 1, 256]}} {
  func.func @misspelt(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>> {
    // expected-error @+1 {{'novella.relu' op 'novella.budget' may not annotate this op (not a declared novella annotation; see dialects/discardable.py)}}
    %0 = "novella.relu"(%x) {novella.budget = {acc = 16384 : i64, spad = 65536 : i64}, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
    return %0 : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  }
}

// -----

module attributes {novella.symbols = {s0 = ["T", 1, 256]}} {
  func.func @mistyped(%x: tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>> {
    // expected-error @+1 {{'novella.relu' op 'novella.dram' must be an affine map of the symbols to one offset, got 0 : i64}}
    %0 = "novella.relu"(%x) {novella.dram = 0 : i64, novella.sram_budget = {acc = 16384 : i64, spad = 65536 : i64}} : (tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>) -> tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
    return %0 : tensor<?x64xf32, affine_map<()[s0] -> (s0, 64)>>
  }
}
