"""Causal-LM files (`.nvcl`): both programs of a `CausalLM` in one file, optionally signed.

Layout: `NVCL`, a little-endian u32 header length, the header (JSON: format, the two artifacts' sizes,
vocab, max_len, page_size, n_pages and, when signed, `hmac_sha256`), then the prefill and decode
artifacts (`.nvla` bytes). The signature (HMAC-SHA256 with the caller's key) covers the magic, the
header without it and both artifacts. Loading checks every header field against the programs it
describes: max_len against both programs' symbol bounds, vocab against the logits, page_size against
the paged cache, n_pages against the NPU's DRAM; each artifact is validated as `artifact.load` does."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
import tempfile
from pathlib import Path

from ..errors import ArtifactError
from .checks import DRAM_LIMIT

MAGIC = b"NVCL"
FORMAT = 2
MAX_HEADER = 1 << 16
FIELDS = {"format", "sizes", "vocab", "max_len", "page_size", "n_pages", "hmac_sha256"}


def _mac(key, head: dict, body: bytes) -> str:
    key = key.encode() if isinstance(key, str) else key
    if not isinstance(key, bytes) or not key:
        raise ArtifactError("the signing key must be non-empty bytes or str")
    canon = json.dumps({k: v for k, v in head.items() if k != "hmac_sha256"}, sort_keys=True).encode()
    return hmac.new(key, MAGIC + canon + body, hashlib.sha256).hexdigest()


def save(lm, path, key=None) -> None:
    """Writes `lm` to `path` (atomically: a temp file renamed), signed when `key` is given."""
    blobs = []
    for m in (lm.prefill, lm.decode):
        with tempfile.TemporaryDirectory() as d:
            m.save(Path(d) / "a.nvla")
            blobs.append((Path(d) / "a.nvla").read_bytes())
    head = {"format": FORMAT, "sizes": [len(b) for b in blobs], "vocab": lm.vocab, "max_len": lm.max_len,
            "page_size": lm.page_size, "n_pages": lm.n_pages}  # fmt: skip
    body = b"".join(blobs)
    if key is not None:
        head["hmac_sha256"] = _mac(key, head, body)
    raw = json.dumps(head).encode()
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + struct.pack("<I", len(raw)) + raw + body)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path, config=None, key=None):
    """The (prefill, decode, vocab, max_len, page_size, n_pages) of a file `save` wrote, checked."""
    from simulator import load_config

    from ..artifact import format as fmt
    from ..pipeline import CompiledModel

    where = f"causal-LM file '{path}'"
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ArtifactError(f"cannot read {where}: {e.strerror or e}") from None
    head, body = _split(data, where)
    if key is not None:
        fmt.verify_signature(where, head.get("hmac_sha256"), _mac(key, head, body))
    config = config or load_config()
    arts, off = [], 0
    for name, size in zip(("prefill", "decode"), head["sizes"]):
        arts.append(fmt.loads(body[off : off + size], config, where=f"{where}, {name} program"))
        off += size
    _check_against(head, *arts, where)
    models = [CompiledModel(a, config) for a in arts]
    return (*models, head["vocab"], head["max_len"], head["page_size"], head["n_pages"])


def _split(data: bytes, where: str) -> tuple[dict, bytes]:
    if data[:4] != MAGIC:
        raise ArtifactError(f"{where} is not a novella causal-LM file (bad magic)")
    if len(data) < 8:
        raise ArtifactError(f"{where} is truncated ({len(data)} bytes)")
    (n,) = struct.unpack("<I", data[4:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise ArtifactError(f"{where}: header length {n} does not fit the file ({len(data)} bytes); copy it again")
    try:
        head = json.loads(data[8 : 8 + n])
    except (ValueError, UnicodeDecodeError) as e:
        raise ArtifactError(f"{where}: the header is not JSON ({e}); copy it again") from None
    if not isinstance(head, dict):
        raise ArtifactError(f"{where}: the header is a {type(head).__name__}, not an object")
    missing = sorted({"sizes", "vocab", "max_len", "page_size", "n_pages"} - set(head))
    if missing:
        raise ArtifactError(f"{where}: header field '{missing[0]}' is missing")
    unknown = sorted(set(head) - FIELDS)
    if unknown:
        raise ArtifactError(f"{where}: header field '{unknown[0]}' is not a causal-LM field")
    if head.get("format", 1) not in (1, FORMAT):
        raise ArtifactError(f"{where}: header field 'format' is {head['format']!r}; this novella-mlir reads {FORMAT}")
    for k in ("vocab", "max_len", "page_size", "n_pages"):
        v = head[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArtifactError(f"{where}: header field '{k}' is {v!r}, not a positive int")
    sizes, body = head["sizes"], data[8 + n :]
    ok = isinstance(sizes, list) and len(sizes) == 2 and all(type(s) is int and s > 0 for s in sizes)
    if not ok or sum(sizes) != len(body):
        raise ArtifactError(f"{where}: header field 'sizes' is {sizes!r}, the file holds {len(body)} bytes after it")
    return head, body


def _check_against(head: dict, prefill, decode, where: str) -> None:
    """Every header field against the programs: nothing runs outside what they were compiled for."""

    def bad(field, value, why):
        raise ArtifactError(f"{where}: header field '{field}' is {value}, but {why}; the file was edited or damaged")

    for name, art, want in (("prefill", prefill, [1, head["max_len"]]), ("decode", decode, [1, head["max_len"] - 1])):
        if len(art.symbols) != 1 or list(art.symbols[0][1:]) != want:
            got = [list(s[1:]) for s in art.symbols]
            bad("max_len", head["max_len"], f"the {name} program is compiled for {got} (max_len gives {want})")
        kv = art.kv or {}
        if kv.get("page_size") != head["page_size"]:
            bad("page_size", head["page_size"], f"the {name} program's cache pages hold {kv.get('page_size')}")
        logits = art.programs[0].outputs[0].shape if art.programs[0].outputs else []
        if not logits or logits[-1] != [head["vocab"]]:
            bad("vocab", head["vocab"], f"the {name} program's logits have {logits[-1:] or 'no'} entries")
    if prefill.kv.get("slots") != decode.kv.get("slots"):
        raise ArtifactError(f"{where}: the prefill and decode programs page different caches")
    block = sum(int(s["page_elems"]) for s in prefill.kv["slots"])
    if head["n_pages"] * block > DRAM_LIMIT:
        bad("n_pages", head["n_pages"], f"{head['n_pages']} pages of {block} elements exceed the NPU's DRAM "
            f"({DRAM_LIMIT} elements)")  # fmt: skip
