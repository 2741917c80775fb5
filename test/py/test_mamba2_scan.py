"""A stock Mamba2 mixer (transformers' Bamba, its `torch_forward` path: the depthwise causal conv1d, the
chunked selective scan with the pad to a whole chunk, segment sums, `exp` of cumulative sums, einsums)
against eager at lengths 1, 2, an odd middle, a partial last tile and the maximum, in one chunk and over
several."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch

transformers = pytest.importorskip("transformers")


class Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).last_hidden_state


def bamba(chunk: int):
    cfg = transformers.BambaConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=64, mamba_n_heads=4, mamba_d_state=8, mamba_chunk_size=chunk, attn_layer_indices=[],
        bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    return Logits(transformers.BambaModel(cfg).eval()).eval()


def test_bamba_mixer_in_one_chunk():
    model = bamba(chunk=128)
    lengths = (1, 2, 37, 67, 70)
    npu = compile_torch(model, torch.randint(0, 100, (1, 8)), min_len=1, max_len=70, cache=False)
    for n in lengths:
        ids = torch.randint(3, 100, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = model(ids)
        torch.testing.assert_close(npu(ids, check_hazards=n == 37), want, rtol=1e-4, atol=1e-4)


def test_more_than_one_chunk_is_a_program_per_chunk_count():
    """torch.export traces the chunk count at the example length, guarding the count but not the length:
    the range splits where the count changes (`frontend/guards.py`), each part traced at its own count,
    one compile_torch call: T = 1, [2, 15], 16 (no pad), [17, 31] (two chunks: the state carried from the
    first into the second, the segment sums over chunks). Checked against eager in each program: in the
    first chunk, at a chunk boundary, past it and at the maximum (a partial last chunk)."""
    model = bamba(chunk=16)
    npu = compile_torch(model, torch.randint(0, 100, (1, 8)), min_len=1, max_len=31, cache=False)
    assert len(npu.artifact.programs) >= 3 and [17, 31] in [p.ranges[0] for p in npu.artifact.programs]
    for n in (1, 9, 16, 17, 31):
        ids = torch.randint(3, 100, (1, n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = model(ids)
        torch.testing.assert_close(npu(ids, check_hazards=n == 17), want, rtol=1e-4, atol=1e-4)
