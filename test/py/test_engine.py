"""Continuous batching (`decoding/engine.py`) against transformers' greedy `generate`, per sequence.

Requests of prompt lengths 1, 7, 33 and 200 join a running batch at different steps, each with its
own max_new_tokens; pages of a common prefix are shared and copied on write; a pool too small for
everyone queues and preempts, and never corrupts a running sequence. Hazard checking is on."""

from __future__ import annotations

import pytest
import torch

tf = pytest.importorskip("transformers")

from lm_models import check, prompt, reference, shared_lm  # noqa: E402

from novella_mlir.causal_lm import CausalLM  # noqa: E402
from novella_mlir.decoding.engine import BatchBoundError, Engine  # noqa: E402
from novella_mlir.errors import InputError  # noqa: E402
from novella_mlir.runtime.kv import KvCacheFullError  # noqa: E402

MAX_LEN = 224
PS = 16


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    return request.param, *shared_lm(request.param, MAX_LEN, PS)  # as test_batched_decode's


def test_requests_join_at_different_steps(model):
    """Lengths 1, 7, 33, 200 join at steps 0, 2, 5, 9 with their own max_new_tokens; each leaves at its
    own length and frees its pages; every sequence is token-identical to hf.generate."""
    name, hf, lm = model
    eng = Engine(lm)
    plan = {0: (1, 12), 2: (7, 9), 5: (33, 11), 9: (200, 6)}
    reqs = []
    while len(reqs) < len(plan) or not eng.done:
        if eng.steps in plan:
            t, n = plan[eng.steps]
            reqs.append(eng.add(prompt(t, seed=t), n))
        eng.step()
    assert [r.admitted_at for r in reqs] == list(plan)
    assert not eng.running and eng.pool.in_use == 0
    assert max(eng.batch_sizes) == 4  # all four in the running batch at once
    for r in reqs:
        assert r.finish_reason == "length" and len(r.generated) == r.max_new_tokens
        check(hf, r, name)


def test_generate_of_a_list_runs_on_the_engine(model):
    name, hf, lm = model
    prompts = [torch.tensor(prompt(t, seed=20 + t)) for t in (1, 7, 33, 200, 5)]
    outs = lm.generate(prompts, max_new_tokens=5)  # 5 prompts, max_batch 4: the last one queues
    for p, out in zip(prompts, outs):
        assert out.tolist() == reference(hf, p.tolist(), 5)[0], name
    first = {s.sequence: i for i, s in reversed(list(enumerate(lm.last_run.steps)))}
    assert first[4] > first[0]  # joined after another left
    assert lm.session().pool.in_use == 0


def test_common_prefix_pages_are_shared_not_recomputed(model):
    """Three prompts with a 40-token common prefix (2.5 pages): the later two share the first's pages,
    run no prefill of their own, and copy the half-shared third page on their first write into it."""
    name, hf, lm = model
    base = prompt(40, seed=7)
    prompts = [base + prompt(6, seed=8), base + prompt(3, seed=9), base[:37] + prompt(4, seed=10)]
    peaks = {}
    for share in (True, False):
        eng = Engine(lm, share_prefix=share)
        reqs = [eng.add(p, 6) for p in prompts]
        peak = 0
        while not eng.done:
            eng.step()
            peak = max(peak, eng.pool.in_use)
        peaks[share] = peak
        for r in reqs:
            check(hf, r, f"{name} share={share}")
        prefills = [s.sequence for s in eng.run.steps if s.kind == "prefill"]
        if share:
            assert prefills == [reqs[0].id] and [r.shared for r in reqs] == [0, 40, 37]
            assert eng.copies >= 2  # the third page, once per sequence writing into it while shared
        else:
            assert sorted(prefills) == [r.id for r in reqs] and eng.copies == 0
        assert eng.pool.in_use == 0 and all(c == 0 for c in eng.pool.refs)
    assert peaks[True] < peaks[False]


def test_a_small_pool_queues_and_preempts_without_corrupting(model):
    """A pool of 6 pages for requests of up to 4 pages each: later requests wait, a running one is
    preempted (recomputed later) when pages run out; every sequence still matches hf.generate."""
    name, hf, lm = model
    small = CausalLM(lm.prefill, lm.decode, lm.vocab, lm.max_len, lm.page_size, n_pages=6)
    small.max_batch = 4
    eng = Engine(small)
    reqs = [eng.add(prompt(t, seed=30 + t), n) for t, n in ((20, 30), (33, 12), (7, 20))]
    peak = 0
    while not eng.done:
        eng.step()
        peak = max(peak, eng.pool.in_use)
    assert peak <= 6 and sum(r.preemptions for r in reqs) >= 1
    for r in reqs:
        check(hf, r, name)
    assert eng.pool.in_use == 0


def test_bad_requests_are_refused_and_running_ones_go_on(model):
    name, hf, lm = model
    eng = Engine(lm)
    ok = eng.add(prompt(9, seed=1), 4)
    eng.step()
    with pytest.raises(InputError, match=f"more than max_len={MAX_LEN}"):
        eng.add(prompt(MAX_LEN + 1, 0), 1)
    with pytest.raises(InputError, match=f"would pass max_len={MAX_LEN}"):
        eng.add(prompt(MAX_LEN - 3, 0), 4)
    with pytest.raises(InputError, match="empty"):
        eng.add([], 1)
    with pytest.raises(InputError, match=r"token id 512 is outside the vocabulary"):
        eng.add([3, 512], 1)
    with pytest.raises(BatchBoundError, match="outside the compiled bound \\[1, 4\\]"):
        Engine(lm, max_batch=5)
    tiny = CausalLM(lm.prefill, lm.decode, lm.vocab, lm.max_len, lm.page_size, n_pages=2)
    with pytest.raises(KvCacheFullError, match="needs 3 pages .* more than the whole pool of 2"):
        Engine(tiny).add(prompt(40, 0), 2)
    eng.run_all()
    check(hf, ok, name)


def test_eos_ends_one_request_early(model):
    name, hf, lm = model
    p = prompt(5, seed=4)
    full = reference(hf, p, 8)[0]
    eos = full[7]
    eng = Engine(lm)
    a, b = eng.add(p, 8, eos_token_id=[eos, 511]), eng.add(prompt(11, seed=5), 8)
    eng.run_all()
    assert a.finish_reason == "eos" and a.tokens == full[: full.index(eos, 5) + 1]
    assert b.finish_reason == "length"
    check(hf, b, name)
