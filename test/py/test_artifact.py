"""Artifact files: save/load round trip, and every kind of bad file refused with an ArtifactError."""

from __future__ import annotations

import json
import struct

import models
import numpy as np
import pytest
import torch

import novella_mlir
from novella_mlir import ArtifactError, artifact
from simulator import load_config


@pytest.fixture(scope="module")
def npu():
    return models.compile_model("mlp", 2048, buckets=False)[2]


@pytest.fixture
def saved(npu, tmp_path):
    path = tmp_path / "model.nvla"
    npu.save(path)
    return path


def _row_load(a):
    """The first instruction template of the first macro whose `rows` is a variable field (a row-tile LOAD)."""
    return next(i for i in a.macros[0].insts if "rows" in i.var)


def _layout(data: bytes) -> tuple[int, int, int]:
    """(start of metadata, start of weights blob, end) of a saved file."""
    hlen = struct.unpack("<I", data[8:12])[0]
    header = json.loads(data[12 : 12 + hlen])
    meta = 12 + hlen
    return meta, meta + header["meta_bytes"], meta + header["meta_bytes"] + header["blob_bytes"]


def _refused(path, match: str, config=None) -> str:
    with pytest.raises(ArtifactError, match=match) as e:
        artifact.load(path, config or load_config())
    assert str(path) in str(e.value)
    return str(e.value)


def _rewrite(path, fn) -> None:
    path.write_bytes(fn(bytearray(path.read_bytes())))


def _flip(at: int):
    def fn(b):
        b[at] ^= 0x40
        return bytes(b)

    return fn


@pytest.mark.parametrize("length", [1, 65, 200])
def test_round_trip_gives_identical_outputs_and_program(npu, saved, length):
    loaded = novella_mlir.load(saved)
    x = models.SPECS["mlp"].example(length)
    assert torch.equal(loaded(x), npu(x))
    assert np.array_equal(loaded.last_run.program.words, npu.last_run.program.words)
    assert loaded.artifact.metadata() == npu.artifact.metadata()
    for name, w in npu.artifact.weights.items():
        assert np.array_equal(loaded.artifact.weights[name], w)


def test_flipped_byte_in_weights_is_refused(saved):
    _, blob, end = _layout(saved.read_bytes())
    _rewrite(saved, _flip((blob + end) // 2))
    _refused(saved, "corrupted \\(checksum mismatch\\)")


def test_flipped_byte_in_metadata_is_refused(saved):
    meta, blob, _ = _layout(saved.read_bytes())
    _rewrite(saved, _flip((meta + blob) // 2))
    _refused(saved, "corrupted \\(checksum mismatch\\)")


def test_corrupted_header_is_refused(saved):
    _rewrite(saved, lambda b: bytes(b[:12]) + b"{not json" + bytes(b[21:]))
    _refused(saved, "corrupted header")


@pytest.mark.parametrize("keep", [0.999, 0.5, 0.01])
def test_truncated_file_is_refused(saved, keep):
    data = saved.read_bytes()
    saved.write_bytes(data[: int(len(data) * keep)])
    _refused(saved, "truncated")


def test_trailing_garbage_is_refused(saved):
    saved.write_bytes(saved.read_bytes() + b"\0" * 8)
    _refused(saved, "trailing bytes")


@pytest.mark.parametrize("content", [b"", b"NVL", b"PK\x03\x04" + b"\0" * 64])
def test_wrong_magic_is_refused(saved, content):
    saved.write_bytes(content)
    _refused(saved, "not a novella artifact \\(bad magic\\)")


def test_other_format_version_is_refused(saved):
    _rewrite(saved, lambda b: bytes(b[:4]) + struct.pack("<I", artifact.FORMAT_VERSION + 1) + bytes(b[8:]))
    msg = _refused(saved, f"format version {artifact.FORMAT_VERSION + 1}")
    assert f"reads {artifact.FORMAT_VERSION}" in msg


def test_other_config_is_refused(saved, tmp_path):
    toml = tmp_path / "small.toml"
    toml.write_text("[scratchpad]\nbytes = 131072\n")
    other = load_config(toml)
    assert other.spad_bytes != load_config().spad_bytes
    _refused(saved, "another hardware config", config=other)
    with pytest.raises(ArtifactError, match="another hardware config"):
        novella_mlir.load(saved, config=other)


def _resave(npu, path, edit) -> None:
    """Saves `npu`'s artifact with metadata edited by `edit` (a valid checksum: a buggy writer, not corruption)."""
    npu.save(path)
    art = artifact.load(path)
    edit(art)
    art.save(path)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda a: setattr(a.tiles[0], "macro", 7), "names macro -1, which the program does not list"),
        (lambda a: a.tiles[0].grid.append([1]), "grid dims"),
        (lambda a: a.tiles[0].bases.pop("1"), "no DRAM base"),
        (lambda a: setattr(_row_load(a), "var", {"rows": [["s0", "+"]]}), "malformed expression"),
        (lambda a: setattr(_row_load(a), "var", {"rows": [["d7"]]}), "refers to d7"),
        (lambda a: setattr(_row_load(a), "opcode", "JUMP"), "JUMP"),
        (lambda a: a.weight_layout["0.bias"][1].append(2), "weight layout needs"),
        (lambda a: setattr(a, "symbols", [["T", 9, 1]]), "bad symbol bounds"),
        (lambda a: setattr(a.tiles[0], "last", [[99, 0]]), "tiles[0].last[0]: expected [template, guard]"),
        (lambda a: setattr(a.tiles[0], "affine", ["7"]), "tiles[0].affine[0]: '7' is not a tensor slot"),
        (lambda a: setattr(_row_load(a), "affine", ["cols"]), "affine[0]: 'cols' is not a variable field"),
    ],
)
def test_malformed_metadata_is_refused(npu, tmp_path, edit, match):
    path = tmp_path / "m.nvla"
    _resave(npu, path, edit)
    msg = _refused(path, "malformed metadata")
    assert match in msg
