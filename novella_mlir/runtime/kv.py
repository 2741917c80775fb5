"""A decoding session: one simulated NPU whose DRAM (weights + paged KV cache) persists across steps.

DRAM layout: one segment per program (its weights, written once, and its activations), then the
page pool. A block (vLLM's term) holds one page of every cache slot (each layer's K and V); a
sequence's block table maps its logical pages to blocks, allocated on demand and freed when it
ends. Before a program runs, its DMA descriptors are relocated to its segment, and every
descriptor in the virtual cache window (`kernels/kv_cache.py`) is mapped through the block table:
the per-step address slots. The host writes only token ids and positions, reads only logits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from simulator import Simulator, isa

from ..errors import InputError
from ..machine.target import Target
from . import expr
from .jit import Jit
from .step import Stepper, with_lanes

_DMA = (int(isa.Opcode.LOAD), int(isa.Opcode.STORE), int(isa.Opcode.GATHER))
_BASE = isa.field(isa.Opcode.LOAD, "dram_base")  # the DMAs' one dram_base layout
assert all(isa.field(op, "dram_base") == _BASE for op in _DMA), "kv.py relocates every DMA's dram_base alike"
_DMA_CODES = np.asarray(_DMA, np.int64)
_layout = lambda f: np.asarray([f.lane, f.offset, f.mask, f.hi, f.bits, int(f.signed)], np.int64)  # noqa: E731
_OP_LAYOUT, _BASE_LAYOUT = _layout(isa.OPCODE), _layout(_BASE)


class KvCacheFullError(InputError):
    """The page pool has no free block for a sequence that needs one."""


@dataclass
class BlockTable:
    """One sequence's pages: `blocks[j]` holds positions [j * page_size, (j + 1) * page_size)."""

    blocks: list = field(default_factory=list)
    length: int = 0  # positions written


class PagePool:
    """Free-list allocator of `n_blocks` blocks, reference-counted: a block shared by several
    sequences (a common prompt prefix, `share`) is freed when the last of them releases it, and is
    copied before one of them writes into it (`writable`: copy-on-write)."""

    def __init__(self, n_blocks: int, page_size: int):
        self.n_blocks, self.page_size = n_blocks, page_size
        self.free = list(range(n_blocks))[::-1]
        self.refs = [0] * n_blocks

    @property
    def in_use(self) -> int:
        return self.n_blocks - len(self.free)

    def reserve(self, table: BlockTable, positions: int) -> None:
        """Grows `table` to hold `positions` positions, or raises KvCacheFullError."""
        need = -(-positions // self.page_size) - len(table.blocks)
        if need > len(self.free):
            raise KvCacheFullError(
                f"the KV cache is out of pages: {need} more needed, {len(self.free)} free of {self.n_blocks} "
                f"(page_size {self.page_size}); raise n_pages in compile_causal_lm or decode fewer sequences at once"
            )
        table.blocks += [self._take() for _ in range(need)]

    def release(self, table: BlockTable) -> None:
        for b in table.blocks[::-1]:
            self._drop(b)
        table.blocks = []

    def _drop(self, b: int) -> None:
        if b < 0:
            return
        self.refs[b] -= 1
        if self.refs[b] == 0:
            self.free.append(b)

    def drop_before(self, table: BlockTable, pages: int) -> None:
        """Frees the blocks of `table`'s first `pages` pages (out of a sliding window: never read again);
        their entries become -1, which a program addressing them is refused for."""
        for j in range(min(pages, len(table.blocks))):
            self._drop(table.blocks[j])
            table.blocks[j] = -1

    def _take(self) -> int:
        b = self.free.pop()
        self.refs[b] = 1
        return b

    def share(self, src: BlockTable, dst: BlockTable, positions: int) -> None:
        """`dst` (empty) takes the pages of `src` holding its first `positions` positions, shared."""
        if dst.blocks:
            raise ValueError("a sequence shares a prefix only before it has pages of its own")
        dst.blocks = src.blocks[: -(-positions // self.page_size)]
        for b in dst.blocks:
            self.refs[b] += 1
        dst.length = positions

    def writable(self, table: BlockTable, page: int, copy) -> bool:
        """Makes page `page` of `table` its own before a write: a shared block is copied to a free one
        (`copy(src_block, dst_block)`) and the copy replaces it in `table`. Whether it copied."""
        b = table.blocks[page]
        if self.refs[b] == 1:
            return False
        if not self.free:
            raise KvCacheFullError(
                f"the KV cache is out of pages: 1 needed to copy a shared page, 0 free of {self.n_blocks} "
                f"(page_size {self.page_size}); raise n_pages in compile_causal_lm or decode fewer sequences at once"
            )
        nb = self._take()
        copy(b, nb)
        self.refs[b] -= 1
        table.blocks[page] = nb
        return True


@dataclass
class Translation:
    """Where a program's DMA descriptors go: relocated words, and the paged ones' (row, slot, page, offset)."""

    words: np.ndarray
    rows: np.ndarray
    slot: np.ndarray
    page: np.ndarray
    offset: np.ndarray


class Session:
    """Runs the programs of `models` (name -> CompiledModel with paged caches) on one persistent DRAM."""

    def __init__(self, models: dict, config, n_blocks: int, check_hazards: bool = True):
        self.models = models
        kv = next(iter(models.values())).artifact.kv
        self.page_size, self.vbase, self.vspan = kv["page_size"], kv["vbase"], kv["vspan"]
        self.page_elems = [s["page_elems"] for s in kv["slots"]]
        self.slot_base = np.cumsum([0] + self.page_elems[:-1]).astype(np.int64)
        self.block_elems = int(sum(self.page_elems))
        self._page_elems = np.asarray(self.page_elems, np.int64)
        self.segments, top, align = {}, 0, Target.from_config(config).dram_align
        for name, m in models.items():
            self.segments[name] = top
            top += -(-_max_dram(m.artifact) // align) * align
        self.pool_base = top
        self.pool = PagePool(n_blocks, self.page_size)
        self.sim = Simulator(config, top + n_blocks * self.block_elems, check_hazards=check_hazards)
        for name, m in models.items():
            for w, (offset, _) in m.artifact.weight_layout.items():
                self.sim.dram.write(self.segments[name] + offset, m.artifact.weights[w].ravel())
        self.kv_layout = np.asarray(
            [self.pool_base, self.block_elems, self.vbase, self.vspan]
            + [v for pe, sb in zip(self.page_elems, self.slot_base.tolist()) for v in (pe, sb)],
            np.int64,
        )
        self._held: dict = {}  # per program: (a copy of the block list, its array) of the last step (`_blocks`)
        self.steppers = {
            name: Stepper(
                m.artifact,
                m.jit,
                lambda w, seg=self.segments[name]: self._relocate(w, seg),
                self.kv_layout,
                relocation=self._relocation(self.segments[name]),
            )  # fmt: skip
            for name, m in models.items()
        }

    @property
    def kv_bytes_per_block(self) -> int:
        return self.block_elems * 4

    def copy_block(self, src: int, dst: int) -> None:
        """Copies block `src` (one page of every cache slot) to block `dst` in DRAM."""
        at = lambda b: self.pool_base + b * self.block_elems  # noqa: E731
        self.sim.dram.write(at(dst), self.sim.dram.read(at(src), self.block_elems))

    def reference(self, name: str, syms: tuple, table: BlockTable) -> np.ndarray:
        """The words of program `name` the readable way: a fresh JIT instantiates all of it, every DMA
        descriptor is relocated and each paged one mapped through `table` (what `Stepper` must equal)."""
        tr = self._translate(
            Jit(self.models[name].artifact).instantiate(with_lanes(self.models[name].artifact, syms)).words,
            self.segments[name],
        )
        blocks = np.asarray(table.blocks, np.int64)
        if tr.page.size and tr.page.max() >= blocks.size:
            raise RuntimeError(f"{name} addresses page {int(tr.page.max())}, the sequence has {blocks.size}")
        if tr.page.size and np.any(blocks[tr.page] < 0):
            raise RuntimeError(f"{name} addresses a page freed out of the window ({int(tr.page.min())})")
        phys = self.pool_base + blocks[tr.page] * self.block_elems + self.slot_base[tr.slot] + tr.offset
        _BASE.put(tr.words, phys, tr.rows)
        return tr.words

    def _blocks(self, name: str, blocks: list) -> np.ndarray:
        """The int64 array of a sequence's block list for program `name`: one array per program, rewritten
        in place when the list changed (a new one when its length did), so that a step's patch takes the
        array it took last step (`Stepper.words`' compiled entry, not numba's dispatcher)."""
        held = self._held.get(name)
        if held is not None and held[0] == blocks:
            return held[1]
        if held is not None and len(held[0]) == len(blocks):
            held[1][:] = blocks
        else:
            held = (None, np.asarray(blocks, np.int64))
        self._held[name] = (list(blocks), held[1])
        return held[1]

    def _translate(self, words: np.ndarray, seg: int) -> Translation:
        words = np.array(words, dtype=np.uint64, copy=True)
        op = isa.opcodes(words)
        base = _BASE.get(words)
        dma = np.isin(op, _DMA)
        paged = dma & (base >= self.vbase)
        plain = dma & ~paged
        _BASE.put(words, base[plain] + seg, plain)
        rows = np.flatnonzero(paged)
        v = base[rows] - self.vbase
        slot = v // self.vspan
        if np.any(slot >= len(self.page_elems)):
            raise RuntimeError("a DMA descriptor addresses a cache slot the program does not have")
        pe = np.asarray(self.page_elems, np.int64)[slot]
        rem = v % self.vspan
        return Translation(words, rows, slot, rem // pe, rem % pe)

    def _relocation(self, seg: int) -> tuple:
        """`_relocate`'s arguments after the words (`Stepper` relocates a new bucket's words in the call
        that builds its tables)."""
        return _DMA_CODES, _OP_LAYOUT, _BASE_LAYOUT, seg, self.vbase, self.vspan, self._page_elems

    def _relocate(self, words: np.ndarray, seg: int) -> Translation:
        """`_translate` in one compiled pass (`_bucket_numba.relocate`): what a bucket's instantiation uses;
        `reference` keeps the readable one, and every step's words are tested against it."""
        from ._bucket_numba import relocate

        out = relocate(words, *self._relocation(seg))
        if out[-1]:
            raise RuntimeError("a DMA descriptor addresses a cache slot the program does not have")
        return Translation(*out[:-1])

    def run(self, name: str, inputs: dict, syms: tuple, table):
        """Runs program `name` at symbol values `syms` for the sequence of `table` (a BlockTable, or the
        virtual page -> block array of a batched program: `runtime/batch.py`).

        `inputs`: input index -> array (the non-paged inputs). Returns (non-paged outputs, stats,
        host seconds for the JIT (a new bucket's instantiation, or the patch of the injected fields),
        simulator seconds, the words run (the bucket's array: patched again by the next step), and
        whether the step instantiated a new bucket)."""
        art = self.models[name].artifact
        seg = self.segments[name]
        t0 = time.perf_counter()
        blocks = table if isinstance(table, np.ndarray) else self._blocks(name, table.blocks)
        words, new = self.steppers[name].words(tuple(syms), blocks)
        t1 = time.perf_counter()
        for i, x in inputs.items():
            self.sim.dram.write(seg + int(expr.evaluate(art.inputs[i].dram, list(syms))), np.ravel(x))
        stats = self.sim.run(words)
        outs = {}
        for i, meta in enumerate(art.outputs):
            if i in art.kv["outputs"]:
                continue
            shape = [int(expr.evaluate(p, list(syms))) for p in meta.shape]
            off = seg + int(expr.evaluate(meta.dram, list(syms)))
            outs[i] = self.sim.dram.read(off, int(np.prod(shape))).reshape(shape).copy()
        t2 = time.perf_counter()
        return outs, stats, t1 - t0, t2 - t1, words, new


def _max_dram(art) -> int:
    """The program's DRAM size at the upper bounds (sizes grow with every symbol)."""
    return int(expr.evaluate(art.dram_size, [hi for _, _, hi in art.symbols]))


def changed_fields(a: np.ndarray, b: np.ndarray) -> list[tuple[int, str, str, int, int]]:
    """(instruction, mnemonic, field, value in a, value in b) of every field that differs between two
    programs of equal length (e.g. consecutive decode steps)."""
    if a.shape != b.shape:
        raise ValueError(f"programs of {len(a)} and {len(b)} instructions are not comparable field by field")
    out = []
    for i in np.flatnonzero(np.any(a != b, axis=1)):
        x, y = isa.decode(a[i]), isa.decode(b[i])
        out += [(int(i), x.mnemonic, f, x.fields[f], y.fields[f]) for f in x.fields if x.fields[f] != y.fields[f]]
    return out
