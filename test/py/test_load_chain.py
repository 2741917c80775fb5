"""Chained LOADs (docs/isa.md, LOAD `chain`): a tile filled from several DRAM pages, one descriptor per
page, the second and later continuing the first's scatter-gather chain.

Functionally a chained LOAD is a LOAD: the tile equals the pages gathered by the block table, pages
out of order in DRAM, on the readable and the fast path bit for bit (memories, cycles, stats). In
time, a chained LOAD starts when its queue has issued, so its latency runs under the chain's data:
the cycles are written out from docs/isa.md's formulas."""

from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator import EncodingError, Opcode, Simulator, decode, disassemble, encode, load_config
from simulator.errors import HazardError
from simulator.isa import field

CFG = load_config()
ISSUE, LAT, BW = CFG.issue_cycles, CFG.dma_latency, CFG.dram_bytes_per_cycle
PS, HD, PAGES = 16, 32, 4  # page rows, head dim, pages per tile
PAGE = PS * HD
DRAM = 16 * PAGE


def _page_loads(blocks, chain=True, sram=0, **first):
    """One LOAD per page of a [PAGES * PS, HD] tile at `sram`: page p from DRAM block blocks[p]."""
    out = []
    for p, b in enumerate(blocks):
        flags = first if p == 0 else {}
        out.append(encode(Opcode.LOAD, sram_addr=sram + p * PAGE, sram_stride=HD, row_step=1, rows=PS,
                          dram_base=b * PAGE, dram_stride=HD, row_start=0, row_bound=PS, cols=HD,
                          chain=int(chain and p > 0), **flags))  # fmt: skip
    return out


def _run(words, fast, data, config=CFG, check=True):
    sim = Simulator(config, DRAM, fast=fast, check_hazards=check)
    sim.dram.write(0, data)
    stats = sim.run(np.stack(words))
    return sim, stats


def _same(words, data, config=CFG):
    """Runs `words` on both paths: (simulator, stats) of the readable one after checking the fast one equals it."""
    slow, s1 = _run(words, False, data, config)
    quick, s2 = _run(words, True, data, config)
    for a, b in ((slow.spad, quick.spad), (slow.acc, quick.acc), (slow.dram, quick.dram)):
        assert np.array_equal(a.data.view(np.uint32), b.data.view(np.uint32))
    assert (s1.cycles, s1.busy, s1.dma_bytes_loaded, s1.dram_busy) == (s2.cycles, s2.busy, s2.dma_bytes_loaded,
                                                                         s2.dram_busy)  # fmt: skip
    assert s1.token_waits == s2.token_waits and s1.by_mnemonic == s2.by_mnemonic
    return slow, s1


@pytest.mark.parametrize("op", [Opcode.LOAD, Opcode.STORE])
def test_chain_field_round_trips_on_the_dmas(op):
    w = encode(op, rows=3, cols=5, chain=1)
    assert decode(w)["chain"] == 1 and field(op, "chain").bits == 1
    assert "chain" in disassemble(w[None]) and "chain" not in disassemble(encode(op, rows=1)[None])
    with pytest.raises(EncodingError, match="chain"):
        encode(op, chain=2)
    with pytest.raises(EncodingError, match="GATHER: unknown field 'chain'"):
        encode(Opcode.GATHER, chain=1)


def _page_stores(blocks, chain=True):
    """One STORE per page: SRAM rows p * PS.. of a [PAGES * PS, HD] tile to DRAM block blocks[p]."""
    return [encode(Opcode.STORE, sram_addr=p * PAGE, sram_stride=HD, row_step=1, rows=PS, dram_base=b * PAGE,
                   dram_stride=HD, row_start=0, row_bound=PS, cols=HD, chain=int(chain and p > 0))
            for p, b in enumerate(blocks)]  # fmt: skip


def test_chained_stores_write_the_pages_and_hide_every_latency_but_the_first():
    """A tile loaded from pages (5, 1, 7, 2), stored to pages (3, 9, 0, 12): DRAM holds the pages moved,
    on both paths bit for bit; chained, the stores pay one latency, as the loads do."""
    data = np.random.default_rng(3).standard_normal(DRAM).astype(np.float32)
    load = _page_loads((5, 1, 7, 2), push_next=0)
    load[-1] = encode(Opcode.LOAD, **{**decode(load[-1]).fields, "push_next": 1})
    relay = encode(Opcode.NOP, pop_prev=1, push_next=1)
    page = PAGE * 4 // BW
    cycles = {}
    for chain in (False, True):
        stores = _page_stores((3, 9, 0, 12), chain)
        stores[0] = encode(Opcode.STORE, **{**decode(stores[0]).fields, "pop_prev": 1})
        sim, stats = _same([*load, relay, *stores], data)
        for src, dst in zip((5, 1, 7, 2), (3, 9, 0, 12)):
            assert np.array_equal(sim.dram.read(dst * PAGE, PAGE), data[src * PAGE : (src + 1) * PAGE])
        cycles[chain] = stats.cycles
    loaded = ISSUE + LAT + PAGES * page  # the chained loads (`test_chain_hides_the_latency_...`)
    assert cycles[False] == loaded + ISSUE + PAGES * (ISSUE + LAT + page)
    assert cycles[True] == loaded + ISSUE + ISSUE + LAT + PAGES * page


@pytest.mark.parametrize("blocks", [(0, 1, 2, 3), (9, 2, 14, 5), (3, 3, 0, 7)])
def test_multi_page_tile_equals_the_pages_gathered_by_the_block_table(blocks):
    """Pages out of order in DRAM (and one page twice): the tile is the readable reference's gather."""
    data = np.random.default_rng(len(blocks) + blocks[0]).standard_normal(DRAM).astype(np.float32)
    sim, stats = _same(_page_loads(blocks), data)
    want = np.concatenate([data[b * PAGE : (b + 1) * PAGE] for b in blocks])
    assert np.array_equal(sim.spad.read(0, PAGES * PAGE).view(np.uint32), want.view(np.uint32))
    assert stats.dma_bytes_loaded == PAGES * PAGE * 4


def test_chain_hides_the_latency_of_every_page_but_the_first():
    data = np.ones(DRAM, np.float32)
    page = PAGE * 4 // BW
    _, plain = _same(_page_loads((5, 1, 7, 2), chain=False), data)
    _, chained = _same(_page_loads((5, 1, 7, 2)), data)
    assert plain.cycles == PAGES * (ISSUE + LAT + page) == 916
    assert chained.cycles == ISSUE + LAT + PAGES * page == 613
    assert chained.busy["load"] == PAGES * page + ISSUE + LAT  # the engine begins each at the previous end
    assert chained.dram_busy == plain.dram_busy == PAGES * page


def test_a_chained_load_waits_for_the_token_it_pops():
    """Load tile 0, MATMUL reads it and pushes C2L; the next tile's chain pops it (the slot is free):
    its first LOAD waits for the token, its chained LOADs follow; both paths agree."""
    data = np.random.default_rng(1).standard_normal(DRAM).astype(np.float32)
    words = _page_loads((4, 0, 8, 2), push_next=0)
    words[-1] = encode(Opcode.LOAD, **{**decode(words[-1]).fields, "push_next": 1})
    mm = encode(Opcode.MATMUL, pop_prev=1, push_prev=1, m=PAGES * PS, k=HD, n=HD, a_addr=0, a_stride=HD,
                b_addr=PAGES * PAGE, b_stride=HD, acc_stride=HD)  # fmt: skip
    second = _page_loads((1, 3, 6, 9), pop_next=1)
    sim, stats = _same([*words, mm, *second], data)
    want = np.concatenate([data[b * PAGE : (b + 1) * PAGE] for b in (1, 3, 6, 9)])
    assert np.array_equal(sim.spad.read(0, PAGES * PAGE), want)
    assert stats.token_waits["C2L"]["count"] == 1


def test_a_chained_load_without_a_token_is_a_hazard_on_both_paths():
    """Chaining changes no ordering: a LOAD overwriting what a MATMUL reads without a token is a race."""
    data = np.zeros(DRAM, np.float32)
    words = _page_loads((0, 1, 2, 3), push_next=0)
    words[-1] = encode(Opcode.LOAD, **{**decode(words[-1]).fields, "push_next": 1})
    mm = encode(Opcode.MATMUL, pop_prev=1, m=PAGES * PS, k=HD, n=HD, a_addr=0, a_stride=HD, b_addr=0, b_stride=HD,
                acc_stride=HD)  # fmt: skip
    for fast in (False, True):
        with pytest.raises(HazardError):
            _run([*words, mm, *_page_loads((4, 5, 6, 7))], fast, data)


def test_chain_on_two_engines_stays_on_its_engine():
    """dual_dma (readable path): an unchained LOAD overlaps a chain on the other engine; the chained one
    joins its own chain's engine and the DRAM channel still orders the data phases."""
    dual = load_config(Path(simulator.__file__).parent / "configs" / "dual_dma.toml")
    data = np.arange(DRAM, dtype=np.float32)
    words = _page_loads((3, 2, 1, 0)) + _page_loads((7, 6), sram=PAGES * PAGE)
    sim, stats = _run(words, False, data, dual)
    page = PAGE * 4 // BW
    assert stats.cycles == ISSUE + LAT + 6 * page
    got = sim.spad.read(PAGES * PAGE, 2 * PAGE)
    assert np.array_equal(got, np.concatenate([data[7 * PAGE : 8 * PAGE], data[6 * PAGE : 7 * PAGE]]))
