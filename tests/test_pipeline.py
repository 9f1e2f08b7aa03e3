"""One write pipeline, one settings object, one result family, for every writer.

- every writer goes through the pipeline: none checks its targets, commits or
  prunes itself (read from its imports);
- every writer takes ``options=WriteOptions(...)``, never modifies it, and a
  bad setting fails when the object is built, before any file is opened;
- every writer returns a :class:`WriteResult`: ``bytes_written`` is the bytes
  of the weights files written, padding included, and the result is that int.
"""

from __future__ import annotations

import ast
import os

import numpy as np
import pytest
from helpers import read_back, save_two_file, tensor_bytes, uint8_model
from onnx import numpy_helper

import onnx_light.onnx as onnxl

PACKAGE = os.path.join(os.path.dirname(onnxl.__file__))
WRITERS = ("_io.py", "_save.py", "_align.py", "_dedup.py", "_edit.py", "_convert.py")
# what only the pipeline does: the targets' check, the commit, the one ending, the prune
PIPELINE_ONLY = {
    "_commit.targets": {"check_targets", "target_identities"},
    "_commit.atomic": {"AtomicFiles"},  # (load takes a folder's shared lock to read)
    "_commit.prune": None,
    "_write.finish": None,
    "_write.save_plan": None,
}


@pytest.mark.parametrize("writer", WRITERS)
def test_no_writer_checks_targets_commits_or_prunes_itself(writer):
    with open(os.path.join(PACKAGE, writer), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            forbidden = PIPELINE_ONLY.get(node.module, ())
            names = {a.name for a in node.names}
            if forbidden is None or names & set(forbidden or ()):
                found.append(f"from .{node.module} import {', '.join(sorted(names))}")
    assert not found, found
    assert any(isinstance(n, ast.ImportFrom) and n.module == "_pipeline" for n in ast.walk(tree)), (
        f"{writer} does not go through the pipeline"
    )


def _source(tmp_path):
    model = uint8_model(3, 5000)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    return tmp_path / "m.onnx", model


def _writers(tmp_path, src, opts):
    """Every writer, called with ``opts``: ``{name: (result, destination)}``."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    meta = onnxl.load(src, load_external_data=False)
    variant = onnxl.load(src, load_external_data=False)
    variant.graph.initializer.append(numpy_helper.from_array(np.ones(3000, np.uint8), "new"))
    return {
        "save": (onnxl.save(onnxl.load(src), out / "s.onnx", "s.data", options=opts), "s.onnx"),
        "shared": (
            onnxl.save_model_with_shared_external_data(
                variant, src.parent / "v.onnx", options=opts
            ),
            None,
        ),
        "align": (onnxl.align_external_data_streaming(src, out / "a.onnx", options=opts), "a.onnx"),
        "dedup": (onnxl.deduplicate_external_data([src], [out / "d.onnx"], options=opts), "d.onnx"),
        "edit": (onnxl.save_edited(meta, src, out / "e.onnx", options=opts), "e.onnx"),
    }


def test_every_writer_returns_the_bytes_of_its_weights_files(tmp_path):
    """bytes_written: the weights files' bytes, padding included; the result is that int."""
    src, model = _source(tmp_path)
    opts = onnxl.WriteOptions(alignment=4096)
    for name, (result, dst) in _writers(tmp_path, src, opts).items():
        assert isinstance(result, onnxl.WriteResult), name
        files = sum(os.path.getsize(p) for p in result.weights_paths)
        assert result.weights_paths and result.bytes_written == files == int(result), name
        assert result.bytes_written >= 3000, name
        assert (result.unreferenced, result.removed) == ([], []), name
        if dst is not None:
            assert read_back(tmp_path / "out" / dst) == tensor_bytes(model), name
    padded = onnxl.align_external_data_streaming(src, tmp_path / "p.onnx", options=opts)
    assert padded.bytes_written == 2 * 8192 + 5000  # two tensors padded to 8192, the last not


def test_one_settings_object_for_every_writer_and_never_modified(tmp_path):
    src, _ = _source(tmp_path)
    seen = []
    opts = onnxl.WriteOptions(
        alignment=64, max_shard_size=6000, progress=lambda done, total: seen.append(total)
    )
    before = repr(opts)
    results = _writers(tmp_path, src, opts)
    assert repr(opts) == before
    for name, (result, _) in results.items():  # one shard per tensor of 5000 bytes
        assert len(result.weights_paths) == (1 if name == "shared" else 3), name
    assert seen and all(total >= 0 for total in seen)
    assert isinstance(onnxl.SerializeOptions(), onnxl.WriteOptions)


@pytest.mark.parametrize(
    "settings,error,match",
    [
        ({"alignment": 3000}, ValueError, "power of two"),
        ({"alignment": "4096"}, TypeError, "alignment"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"max_shard_size": True}, TypeError, "max_shard_size"),
        ({"shard_naming": "onnxir"}, ValueError, "shard_naming"),
        ({"size_threshold": -1}, ValueError, "size_threshold"),
        ({"progress": 3}, TypeError, "progress"),
    ],
)
def test_a_bad_setting_fails_when_the_object_is_built(settings, error, match):
    with pytest.raises(error, match=match):
        onnxl.WriteOptions(**settings)
    opts = onnxl.WriteOptions()
    name, value = next(iter(settings.items()))
    with pytest.raises(error, match=match):
        setattr(opts, name, value)


def test_one_default_alignment_and_its_one_exception(tmp_path):
    """WriteOptions aligns to 4096; SerializeOptions, save's, writes dense as onnx does."""
    assert onnxl.WriteOptions().alignment == 4096
    assert onnxl.SerializeOptions().alignment == 0
    src, _ = _source(tmp_path)
    model = onnxl.load(src)
    dense = onnxl.save(model, tmp_path / "d.onnx", "d.data")
    aligned = onnxl.save(model, tmp_path / "a.onnx", "a.data", options=onnxl.WriteOptions())
    assert dense == 3 * 5000 and aligned == 2 * 8192 + 5000


def test_options_that_are_not_settings_are_refused(tmp_path):
    src, _ = _source(tmp_path)
    with pytest.raises(TypeError, match="options must be a WriteOptions or None"):
        onnxl.align_external_data_streaming(src, tmp_path / "a.onnx", options={"alignment": 64})
    with pytest.raises(TypeError, match="SerializeOptions"):
        onnxl.save(onnxl.load(src), tmp_path / "s.onnx", options=4096)
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]


def test_align_positional_settings_replace_the_objects(tmp_path):
    """The original API passes alignment and chunk_size positionally; given, they win."""
    src, model = _source(tmp_path)
    opts = onnxl.WriteOptions(alignment=65536)
    result = onnxl.align_external_data_streaming(
        src, tmp_path / "a.onnx", None, 64, 1024, options=opts
    )
    assert result == 2 * 5056 + 5000 and opts.alignment == 65536
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
