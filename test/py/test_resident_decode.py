"""`--novella-resident` with a decode step's attention over the paged KV cache (`novella.flash_attention` with
`novella.paged_key` / `paged_value`): its query, the RoPE generic's result, read where it is kept (the held
query rows scaled from the region, no LOAD) and its output written by the normalizing DIV into a region that
o_proj's MATMULs read (no STORE, no LOAD); the cache itself stays in DRAM. Tokens and logits against
transformers' greedy generate, hazard checking on, through the batched step (lanes joining and leaving)
and the single-sequence one."""

from __future__ import annotations

import re

import pytest
from lm_models import check, prompt, shared_lm

from novella_mlir.decoding.batched import compile_batched
from novella_mlir.decoding.engine import Engine

MAX_LEN, B = 96, 4


@pytest.fixture(scope="module")
def compiled():
    hf, lm = shared_lm("llama", MAX_LEN)  # as test_causal_lm's
    return hf, compile_batched(hf, lm, (B,), cache=False)


def _attention_macros(ir: str) -> list[str]:
    """The text of every flash attention macro of a program after --novella-schedule."""
    out, at = [], 0
    while (end := ir.find('kernel = "novella.flash_attention"', at)) >= 0:
        out.append(ir[ir.rindex('"novella.macro"', 0, end) : ir.index("\n", end)])
        at = end + 1
    return out


@pytest.mark.parametrize("program", ["decode", "batched"])
def test_the_attention_reads_its_query_and_writes_its_output_on_chip(compiled, program):
    lm = compiled[1]
    npu = lm.decode if program == "decode" else lm.batched[B]
    lines = [line for line in npu.ir("novella-resident").splitlines() if '"novella.flash_attention"' in line]
    assert len(lines) == 2 and all("novella.paged_key" in line for line in lines)
    assert all("x = " in line and "out = " in line and "k = " not in line and "v = " not in line for line in lines)
    for macro in _attention_macros(npu.ir("novella-schedule")):
        assert 'opcode = "STORE"' not in macro and "rx = " in macro and "rout = " in macro
        assert 'fn = "MUL", imm' in macro  # the query's scaling, from the region
        loads = [line for line in macro.splitlines() if 'opcode = "LOAD"' in line]
        assert loads and all("chain = 1" in line or "row_step = 0" in line for line in loads)  # pages, the mask


def test_tokens_match_transformers_with_hazards_checked(compiled):
    """Four requests arriving at different steps (the batched program over 1..4 lanes, prompts of 1 to 40
    tokens, so pasts that cross pages), each against transformers' greedy decoding."""
    hf, lm = compiled
    eng = Engine(lm, check_hazards=True)
    plan, reqs = {0: [(1, 12)], 2: [(7, 9)], 5: [(33, 11)], 9: [(40, 6)]}, []
    while len(reqs) < len(plan) or not eng.done:
        for length, n in plan.get(eng.steps, []):
            reqs.append(eng.add(prompt(length, seed=length), n))
        eng.step()
    for r in reqs:
        check(hf, r, "llama")


def test_one_sequence_decodes_as_transformers(compiled):
    hf, lm = compiled
    eng = Engine(lm, batched=False, check_hazards=True)
    req = eng.add(prompt(17, seed=5), 8)
    while not eng.done:
        eng.step()
    check(hf, req, "llama")


def _macros(ir: str, kernel: str) -> list[str]:
    """The text of every macro of `kernel` of a program after --novella-schedule (its body, then its buffers)."""
    out, at = [], 0
    while (end := ir.find(f'kernel = "{kernel}"', at)) >= 0:
        out.append(ir[ir.rindex('"novella.macro"', 0, end) : ir.index("\n", end)])
        at = end + 1
    return out


@pytest.mark.parametrize("program", ["decode", "batched"])
def test_the_rms_prologue_reads_the_residual_stream_where_it_is_kept(compiled, program):
    """q/k/v and gate/up, RMSNorm in their prologue, read x (kept in the scratchpad) in place: its rows times
    the norm's weight and its squares come from the region, with no COPY of x into the `a` buffer."""
    lm = compiled[1]
    npu = lm.decode if program == "decode" else lm.batched[B]
    found = 0
    for macro in _macros(npu.ir("novella-schedule"), "novella.fused_linear"):
        if "rx = " not in macro or "pa = " not in macro:
            continue
        found += 1
        a = re.search(r'\ba = \["spad", (\d+)', macro).group(1)
        insts = [line for line in macro.splitlines() if '"novella.inst"' in line]
        assert not any('fn = "COPY"' in line and f"dst_addr = {a} : i64" in line for line in insts)
        assert any('fn = "MUL", mode = "ROW"' in line and f"a_addr = {a} : i64" not in line for line in insts)
    assert found >= 6  # two layers' q, k, v (and gate / up), the logits
