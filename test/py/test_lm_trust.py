"""Issue 20 on the causal LM: parameters checked before any compile, signed `.nvcl` files whose header is
checked against its programs, the runtime's box check, and concurrent `generate` calls (each owns its
session) giving exactly the serial results. Tokens against transformers' own greedy `generate`."""

from __future__ import annotations

import json
import struct
import threading

import pytest
import torch

tf = pytest.importorskip("transformers")

from novella_mlir import causal_lm  # noqa: E402
from novella_mlir.causal_lm import compile_causal_lm, load_causal_lm  # noqa: E402
from novella_mlir.errors import ArtifactError, InputError  # noqa: E402

MAX_LEN = 24
VOCAB = 64


def _gpt2(positions=MAX_LEN):
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=positions, bos_token_id=0,
                        eos_token_id=1)  # fmt: skip
    hf = tf.GPT2LMHeadModel(cfg).eval()
    hf.generation_config.eos_token_id = None
    return hf


@pytest.fixture(scope="module")
def lm():
    hf = _gpt2()
    return hf, compile_causal_lm(hf, max_len=MAX_LEN, page_size=8, cache=False)


def _prompt(n, seed):
    return torch.randint(2, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def _reference(hf, ids, n):
    return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                       pad_token_id=0)  # fmt: skip


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(page_size=0), "page_size must be >= 1, got 0"),
        (dict(page_size=2.5), "page_size must be an int"),
        (dict(n_pages=-2), "n_pages must be >= 1"),
        (dict(n_pages=10**9), r"n_pages=1000000000 pages of \d+ elements do not fit the NPU.s DRAM"),
        (dict(max_len=48), r"max_len must be in \[2, 24\] \(the model's position embeddings\), got 48"),
        (dict(max_len=True), "max_len must be an int, got True"),
        (dict(max_batch=0), "max_batch must be >= 1"),
        (dict(fuse_attention="yes"), "fuse_attention must be True or False"),
    ],
)
def test_decode_parameters_are_checked_before_any_compile(monkeypatch, kw, match):
    monkeypatch.setattr(causal_lm, "compile_torch", lambda *a, **k: pytest.fail("compiled before checking"))
    with pytest.raises(InputError, match=match):
        compile_causal_lm(_gpt2(), **{"max_len": MAX_LEN, "page_size": 8, **kw})


@pytest.mark.parametrize(
    "kw, match",
    [(dict(min_len=True), "min_len must be an int, got True"), (dict(max_len=2.5), "max_len must be an int"),
     (dict(min_len=5, max_len=4), "1 <= min_len <= max_len"), (dict(dynamic_dim=-1), "dynamic_dim must be >= 0")],
)  # fmt: skip
def test_compile_bounds_are_checked_before_export(kw, match):
    from novella_mlir import compile_torch

    with pytest.raises(InputError, match=match):
        compile_torch(torch.nn.Linear(4, 4), torch.randn(1, 3, 4), **{"max_len": 8, **kw})


@pytest.mark.parametrize("length", [1, 5, MAX_LEN - 6])
def test_tokens_match_transformers(lm, length):
    hf, npu = lm
    ids = _prompt(length, length)
    assert torch.equal(npu.generate(ids, max_new_tokens=6), _reference(hf, ids, 6))


@pytest.mark.parametrize(
    "prompts, kw, match",
    [
        ([torch.zeros(2, 3, dtype=torch.long)], {}, r"prompt #0 has shape \[2, 3\]; a prompt in a list is 1-D"),
        ([[1, 2.5]], {}, r"prompt #0 must hold token ids \(ints\), found 2.5"),
        ([[1, True]], {}, "found True"),
        ("hello", {}, "prompts must be a"),
        ([], {}, "the list of prompts is empty"),
        ([[3, 4]], dict(max_new_tokens=2.5), "max_new_tokens must be an int, got 2.5"),
        ([[3, 4]], dict(max_new_tokens=True), "max_new_tokens must be an int, got True"),
        ([[3, 4]], dict(max_new_tokens=-1), "max_new_tokens must be >= 0"),
        ([[3, 4]], dict(eos_token_id=VOCAB), r"eos_token_id must be in \[0, 63\]"),
        ([[3, 4]], dict(eos_token_id=[]), "eos_token_id is an empty list"),
        ([[3, 4]], dict(eos_token_id="1"), "eos_token_id must be an int"),
        ([[3, VOCAB]], {}, r"token id 64 is outside the vocabulary \[0, 64\)"),
    ],
)
def test_generate_arguments_are_checked(lm, prompts, kw, match):
    with pytest.raises(InputError, match=match):
        lm[1].generate(prompts, **{"max_new_tokens": 3, **kw})


def test_prompts_as_lists_of_ints_and_eos_as_a_list(lm):
    _, npu = lm
    ids = _prompt(4, 11)
    free = npu.generate(ids, max_new_tokens=8)[0].tolist()
    assert [t.tolist() for t in npu.generate([ids[0].tolist(), ids[0]], max_new_tokens=8)] == [free, free]
    stop = free[6]
    first = free.index(stop, 4)
    for eos in (stop, [stop], [VOCAB - 1, stop]):
        assert npu.generate(ids, max_new_tokens=8, eos_token_id=eos)[0].tolist() == free[: first + 1]


def test_concurrent_generate_calls_give_the_serial_results(lm):
    _, npu = lm
    prompts = [[_prompt(n, 100 + n)[0] for n in (2, 5)], [_prompt(7, 3)[0]], [_prompt(1, 9)[0], _prompt(9, 8)[0]]]
    serial = [[t.tolist() for t in npu.generate(p, max_new_tokens=10)] for p in prompts * 2]
    results, errors = [None] * len(serial), []

    def work(i):
        try:
            results[i] = [t.tolist() for t in npu.generate((prompts * 2)[i], max_new_tokens=10)]
            assert len(npu.last_run.logits) == len((prompts * 2)[i])  # this thread's run
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(serial))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results == serial


def test_the_runtime_refuses_symbols_outside_the_box(lm):
    _, npu = lm
    with pytest.raises(InputError, match="T=25 is outside every compiled program"):
        npu.prefill.jit.instantiate([MAX_LEN + 1])
    sess = npu.session()
    with pytest.raises(InputError, match="is outside every compiled program"):
        sess.steppers["decode"].words((MAX_LEN,), torch.zeros(4, dtype=torch.long).numpy())


def test_signed_files_round_trip_and_refuse_another_key(lm, tmp_path):
    _, npu = lm
    npu.save(tmp_path / "lm.nvcl", key=b"secret")
    back = load_causal_lm(tmp_path / "lm.nvcl", key=b"secret")
    ids = _prompt(3, 1)
    assert torch.equal(back.generate(ids, max_new_tokens=4), npu.generate(ids, max_new_tokens=4))
    with pytest.raises(ArtifactError, match="HMAC-SHA256 mismatch"):
        load_causal_lm(tmp_path / "lm.nvcl", key=b"other")
    npu.save(tmp_path / "plain.nvcl")
    with pytest.raises(ArtifactError, match="is not signed"):
        load_causal_lm(tmp_path / "plain.nvcl", key=b"secret")
    assert [p.name for p in tmp_path.iterdir() if ".tmp" in p.name] == []


def _edit(src, dst, fn):
    data = src.read_bytes()
    (n,) = struct.unpack("<I", data[4:8])
    head = json.loads(data[8 : 8 + n])
    out = fn(head, data[8 + n :])
    if isinstance(out, bytes):
        dst.write_bytes(out)
        return dst
    raw = json.dumps(head).encode()
    dst.write_bytes(data[:4] + struct.pack("<I", len(raw)) + raw + data[8 + n :])
    return dst


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda h, b: h.update(max_len=200), r"header field 'max_len' is 200, but the prefill program is compiled"),
        (lambda h, b: h.update(max_len=12), "header field 'max_len' is 12"),
        (lambda h, b: h.update(vocab=65), "header field 'vocab' is 65"),
        (lambda h, b: h.update(page_size=16), "header field 'page_size' is 16"),
        (lambda h, b: h.update(n_pages=10**9), "header field 'n_pages' is 1000000000.*exceed the NPU's DRAM"),
        (lambda h, b: h.update(n_pages=0), "header field 'n_pages' is 0, not a positive int"),
        (lambda h, b: h.update(vocab=True), "header field 'vocab' is True"),
        (lambda h, b: h.pop("page_size"), "header field 'page_size' is missing"),
        (lambda h, b: h.update(extra=1), "header field 'extra' is not a causal-LM field"),
        (lambda h, b: h.update(sizes=[1, 2]), "header field 'sizes' is"),
        (lambda h, b: h.update(sizes="ab"), "header field 'sizes' is"),
        (lambda h, b: b"NVCL" + struct.pack("<I", 5) + b"{bad}" + b, "the header is not JSON"),
        (lambda h, b: b"NVCL" + struct.pack("<I", 10**6), "header length 1000000 does not fit"),
        (lambda h, b: b"NVCL\x01", "truncated"),
        (lambda h, b: b"NVCX" + b, "bad magic"),
    ],
)
def test_damaged_files_name_the_field(lm, tmp_path, edit, match):
    lm[1].save(tmp_path / "lm.nvcl")
    with pytest.raises(ArtifactError, match=match):
        load_causal_lm(_edit(tmp_path / "lm.nvcl", tmp_path / "bad.nvcl", edit))


def test_a_signed_file_refuses_any_edit(lm, tmp_path):
    lm[1].save(tmp_path / "lm.nvcl", key="k")
    bad = _edit(tmp_path / "lm.nvcl", tmp_path / "bad.nvcl", lambda h, b: h.update(n_pages=h["n_pages"] + 1))
    with pytest.raises(ArtifactError, match="HMAC-SHA256 mismatch"):
        load_causal_lm(bad, key="k")
