module attributes {novella.symbols = {s0 = ["T", 1, 2048]}} {
  func.func @linear(%x: tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>> {
    %w = "novella.weight"() {name = "w"} : () -> tensor<32x64xf32>
    %b = "novella.weight"() {name = "b"} : () -> tensor<32xf32>
    %0 = "novella.linear"(%x, %w, %b) {act = "none"} : (tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    %1 = "novella.relu"(%0) : (tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>) -> tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
    return %1 : tensor<1x?x32xf32, affine_map<()[s0] -> (1, s0, 32)>>
  }
}
