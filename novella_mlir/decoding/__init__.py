"""Decoding support behind `novella_mlir.causal_lm`: argument checks, the `.nvcl` file format, the
host's token choice (transformers' own logits processors) and the batched decode programs."""
