"""Sharded weights: files of at most ``max_shard_size`` bytes, named as onnx-ir names them,
committed together, loadable by onnx, onnx-ir and onnxruntime.

How many files, which tensor in which, and their names, as a user sees them: a
dense layout whose next shard fills up exactly (it starts at offset 0), and the
shard names of weights paths in a subfolder, hidden, or with dotted parts that
are or are not extensions; a tensor ending exactly at ``max_shard_size``;
tensors shared or deduplicated across shard boundaries (each range stored once,
in its first shard); exactly 100 transformers.js shards; a ``shard_naming``
that is not a string.
"""

from __future__ import annotations

import errno
import os

import numpy as np
import onnx
import pytest
from helpers import (
    external_offsets,
    external_places,
    external_tensor,
    folder_digest,
    read_back,
    run_ort,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.cli import main
from onnx_light.onnx._commit import atomic as _atomic
from onnx_light.onnx._plan.layout import shard_name

KiB = 1024


def _model(sizes=(3000, 3000, 10000, 3000, 500, 3000)) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(0, 255, n, dtype=np.uint8), f"W{i}")
        for i, n in enumerate(sizes)
    ]
    return helper.make_model(helper.make_graph([], "g", [], [], inits))


def _shards(path) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = {}
    for location, offset, length in external_offsets(path):
        out.setdefault(location, []).append((offset, length))
    return out


def _check(path, limit: int, alignment: int) -> dict:
    shards = _shards(path)
    folder = os.path.dirname(path)
    for location, spans in shards.items():
        size = os.path.getsize(os.path.join(folder, location))
        assert size == max(o + n for o, n in spans)
        assert size <= limit or len(spans) == 1, "only a tensor over the limit exceeds it"
        assert all(o % alignment == 0 for o, _ in spans)
    return shards


def test_align_into_shards(tmp_path):
    model = _model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "a.onnx",
        "a.onnx.data",
        64,
        options=onnxl.WriteOptions(max_shard_size=8 * KiB),
    )
    shards = _check(tmp_path / "a.onnx", 8 * KiB, 64)
    # W0 + W1 | W2 (10000 bytes, over the limit: alone) | W3 + W4 + W5
    names = [shard_name("a.onnx.data", i, 3) for i in range(3)]
    assert sorted(shards) == names and names[0] == "a-00001-of-00003.onnx.data"
    assert [len(shards[n]) for n in names] == [2, 1, 3]
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    assert tensor_bytes(onnxl.load(tmp_path / "a.onnx")) == tensor_bytes(model)


def test_shard_names_are_onnx_irs(tmp_path):
    ir = pytest.importorskip("onnx_ir")
    from onnx_ir._shard_filename import get_shard_filename

    for location in ("model.onnx.data", "sub/w.bin", "weights", "model.onnx_data"):
        assert shard_name(location, 1, 3) == get_shard_filename(location, 2, 3)
    model = _model()
    onnxl.save(
        model,
        tmp_path / "s.onnx",
        "s.onnx.data",
        options=onnxl.SerializeOptions(alignment=4096, size_threshold=0, max_shard_size=10 * KiB),
    )
    loaded = ir.load(str(tmp_path / "s.onnx"))  # onnx-ir reads our shards
    for init in loaded.graph.initializers.values():
        got = init.const_value.numpy().tobytes()
        assert got == tensor_bytes(model)[f"graph.initializer[{int(init.name[1:])}]"]
    assert onnx.load(str(tmp_path / "s.onnx")) is not None


@pytest.mark.parametrize("threads", [1, 2])
def test_save_and_shared_save_into_shards(tmp_path, runnable, threads):
    opts = onnxl.SerializeOptions(alignment=4096, max_shard_size=64 * KiB, num_threads=threads)
    onnxl.save(runnable, tmp_path / "m.onnx", "m.onnx.data", options=opts)
    shards = _check(tmp_path / "m.onnx", 64 * KiB, 4096)
    assert len(shards) > 1
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(runnable)
    expected = run_ort(tmp_path / "m.onnx")
    variant = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    new = numpy_helper.from_array(np.ones((256, 256), np.float32), "W0")
    variant.graph.initializer[0].CopyFrom(new)
    opts.max_shard_size = 100 * KiB
    onnxl.save_model_with_shared_external_data(variant, tmp_path / "v.onnx", options=opts)
    assert _shards(tmp_path / "v.onnx").keys() >= shards.keys() - {
        shard_name("m.onnx.data", 0, len(shards))
    }
    got = run_ort(tmp_path / "v.onnx")
    assert got[0].shape == expected[0].shape


def test_cli_max_shard_size(tmp_path, capsys):
    model = _model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    code = main(
        ["align", str(tmp_path / "m.onnx"), str(tmp_path / "a.onnx"), "--max-shard-size", "8K"]
        + ["--alignment", "64"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "3 shards" in out and "a-00001-of-00003.onnx.data" in out
    assert main(["info", str(tmp_path / "a.onnx")]) == 0
    info = capsys.readouterr().out
    assert all(shard_name("a.onnx.data", i, 3) in info for i in range(3))  # per shard
    assert main(["verify", str(tmp_path / "a.onnx")]) == 0


def test_shards_committed_together(tmp_path, monkeypatch):
    """A failure at the last rename: no new shard stays, the old files are as they were."""
    model = _model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "a.onnx",
        "a.onnx.data",
        64,
        options=onnxl.WriteOptions(max_shard_size=8 * KiB),
    )
    before = folder_digest(tmp_path)
    real = os.replace

    def refuse_onnx(a, b, *args, **kwargs):
        if str(b).endswith("a.onnx"):
            raise OSError(errno.EBUSY, "busy", str(b))
        return real(a, b, *args, **kwargs)

    monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    monkeypatch.setattr(os, "replace", refuse_onnx)
    with pytest.raises(OSError, match="busy"):
        onnxl.align_external_data_streaming(
            tmp_path / "m.onnx",
            tmp_path / "a.onnx",
            "a.onnx.data",
            4096,
            options=onnxl.WriteOptions(max_shard_size=6 * KiB),
        )
    assert folder_digest(tmp_path) == before


def test_another_shard_count_leaves_no_reference_to_old_shards(tmp_path):
    model = _model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    for limit in (8 * KiB, 16 * KiB, None):
        onnxl.align_external_data_streaming(
            tmp_path / "m.onnx",
            tmp_path / "a.onnx",
            "a.onnx.data",
            64,
            options=onnxl.WriteOptions(max_shard_size=limit),
        )
        assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    assert set(_shards(tmp_path / "a.onnx")) == {"a.onnx.data"}


def test_bad_max_shard_size(tmp_path):
    save_two_file(_model(), tmp_path / "m.onnx", size_threshold=0)
    for bad in (0, -1, 1.5, True, "1G"):
        error = ValueError if isinstance(bad, int) and not isinstance(bad, bool) else TypeError
        with pytest.raises(error, match="max_shard_size"):
            onnxl.align_external_data_streaming(
                tmp_path / "m.onnx",
                tmp_path / "a.onnx",
                "a.data",
                options=onnxl.WriteOptions(max_shard_size=bad),
            )
        with pytest.raises(error, match="max_shard_size"):
            onnxl.SerializeOptions(max_shard_size=bad)
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]


_MANY = """
import resource, sys
import onnx_light.onnx as onnxl
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
onnxl.align_external_data_streaming(
    sys.argv[1], sys.argv[2], "a.data", options=onnxl.WriteOptions(max_shard_size=1)
)
print("ok")
"""


def test_more_shards_than_descriptors(tmp_path):
    """Each shard's descriptor is closed once written: 200 shards under a limit of 64."""
    import subprocess
    import sys

    model = _model([100] * 200)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    done = subprocess.run(
        [sys.executable, "-c", _MANY, str(tmp_path / "m.onnx"), str(tmp_path / "a.onnx")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "ok", done.stderr
    assert len(_shards(tmp_path / "a.onnx")) == 200
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


def test_a_new_dense_shard_starts_at_0_and_fills_up_exactly(tmp_path):
    """Tensors of 60, 50 and 50 bytes, dense, at most 100 bytes a file: the first alone
    (60 + 50 > 100), then the other two together, at 0 and 50 (50 + 50 = 100 fits)."""
    model = uint8_model(3, 50)
    model.graph.initializer[0].raw_data = bytes(range(60))
    model.graph.initializer[0].dims[:] = [60]
    onnxl.save(
        model,
        tmp_path / "m.onnx",
        "m.onnx.data",
        options=onnxl.SerializeOptions(size_threshold=0, max_shard_size=100),
    )
    assert external_offsets(tmp_path / "m.onnx") == [
        ("m-00001-of-00002.onnx.data", 0, 60),
        ("m-00002-of-00002.onnx.data", 0, 50),
        ("m-00002-of-00002.onnx.data", 50, 50),
    ]
    assert sorted(os.listdir(tmp_path)) == [
        "m-00001-of-00002.onnx.data",
        "m-00002-of-00002.onnx.data",
        "m.onnx",
    ]
    assert os.path.getsize(tmp_path / "m-00002-of-00002.onnx.data") == 100
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


# weights path -> the names of its two shards (onnx-ir's naming: the marker goes before
# the chain of extensions, an extension being a dot then a letter, then letters, digits
# or underscores; the folder is never part of the name)
SHARD_NAMES = {
    "a/b/m.onnx.data": ["a/b/m-00001-of-00002.onnx.data", "a/b/m-00002-of-00002.onnx.data"],
    "a/b/.weights": ["a/b/.weights-00001-of-00002", "a/b/.weights-00002-of-00002"],
    "a/.weights": ["a/.weights-00001-of-00002", "a/.weights-00002-of-00002"],
    "m.onnx.1": ["m.onnx.1-00001-of-00002", "m.onnx.1-00002-of-00002"],
    "m.bin-part": ["m.bin-part-00001-of-00002", "m.bin-part-00002-of-00002"],
    "m.v2": ["m-00001-of-00002.v2", "m-00002-of-00002.v2"],
    "m.w_2.data": ["m-00001-of-00002.w_2.data", "m-00002-of-00002.w_2.data"],
}


@pytest.mark.parametrize("location", SHARD_NAMES)
def test_shard_names_of_weights_paths_in_subfolders_hidden_or_dotted(tmp_path, location):
    """Two tensors of 3000 bytes, at most 4000 a file: two shards, named from the weights
    path as listed, in its folder; every byte reads back."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    model = uint8_model(2, 3000)
    onnxl.save(
        model,
        tmp_path / "m.onnx",
        location,
        options=onnxl.SerializeOptions(size_threshold=0, max_shard_size=4000),
    )
    assert [loc for loc, _, _ in external_offsets(tmp_path / "m.onnx")] == SHARD_NAMES[location]
    assert all((tmp_path / name).is_file() for name in SHARD_NAMES[location])
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


def _sizes(folder, names) -> list[int]:
    return [os.path.getsize(os.path.join(folder, n)) for n in names]


# -- shared and deduplicated tensors across shards -------------------------------------


def _shared_span_model(folder) -> dict[str, bytes]:
    """m.onnx: T0 and T2 read one range of w.data, T1 another; returns their bytes."""
    data = np.random.default_rng(0).integers(0, 255, 6000, dtype=np.uint8).tobytes()
    (folder / "w.data").write_bytes(data)
    refs = [("T0", 0, 3000), ("T1", 3000, 3000), ("T2", 0, 3000)]
    inits = [external_tensor(n, "w.data", str(o), k) for n, o, k in refs]
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], inits)), str(folder / "m.onnx"))
    return {n: data[o : o + k] for n, o, k in refs}


def _values(path) -> dict[str, bytes]:
    return {t.name: t.raw_data for t in onnxl.load(path).graph.initializer}


def test_a_shared_range_stays_in_its_home_shard(tmp_path):
    """T2 reads the bytes T0 reads; T1 fills the first shard, so T2 comes after a shard
    boundary: it points at T0's copy in the first shard, nothing is copied twice."""
    expected = _shared_span_model(tmp_path)
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "a.onnx",
        alignment=64,
        options=onnxl.WriteOptions(max_shard_size=4 * KiB),
    )
    first, second = "a-00001-of-00002.onnx.data", "a-00002-of-00002.onnx.data"
    assert result.weights_paths == [str(tmp_path / first), str(tmp_path / second)]
    places = external_places(tmp_path / "a.onnx")
    assert places == {"T0": (first, 0, 3000), "T1": (second, 0, 3000), "T2": (first, 0, 3000)}
    assert _sizes(tmp_path, [first, second]) == [3000, 3000]
    assert result.bytes_written == 6000
    assert _values(tmp_path / "a.onnx") == expected


def test_deduplicated_tensors_point_into_the_first_models_shards(tmp_path):
    """b.onnx holds a.onnx's two tensors again; a.onnx's fill one shard each: b's point at
    them, in their shards, and the shards hold each byte string once."""
    src = tmp_path / "src"
    src.mkdir()
    model = uint8_model(2, 3000)
    save_two_file(model, src / "a.onnx", size_threshold=0)
    save_two_file(model, src / "b.onnx", size_threshold=0)
    out = tmp_path / "out"
    out.mkdir()
    result = onnxl.deduplicate_external_data(
        [src / "a.onnx", src / "b.onnx"],
        [out / "a.onnx", out / "b.onnx"],
        out / "w.data",
        options=onnxl.WriteOptions(alignment=64, max_shard_size=4 * KiB, size_threshold=0),
    )
    names = ["w-00001-of-00002.data", "w-00002-of-00002.data"]
    assert result.weights_paths == [str(out / n) for n in names]
    a, b = external_places(out / "a.onnx"), external_places(out / "b.onnx")
    assert a == b == {"W0": (names[0], 0, 3000), "W1": (names[1], 0, 3000)}
    assert _sizes(out, names) == [3000, 3000] and result.bytes_written == 6000
    assert read_back(out / "a.onnx") == read_back(out / "b.onnx") == tensor_bytes(model)


def test_tensor_ending_exactly_at_the_limit_and_a_new_shard_from_offset_0(tmp_path):
    """W1 ends at exactly max_shard_size: it stays in the first shard. W2 opens the next
    at offset 0, and W3 fits after it there."""
    model = _model([4096, 4096, 3000, 5000])
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "a.onnx",
        alignment=64,
        options=onnxl.WriteOptions(max_shard_size=8 * KiB),
    )
    first, second = "a-00001-of-00002.onnx.data", "a-00002-of-00002.onnx.data"
    assert _shards(tmp_path / "a.onnx") == {
        first: [(0, 4096), (4096, 4096)],
        second: [(0, 3000), (3008, 5000)],
    }
    assert _sizes(tmp_path, [first, second]) == [8 * KiB, 8008]
    assert result.bytes_written == 8 * KiB + 8008
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


# -- transformers.js: exactly 100 files ------------------------------------------------


def test_exactly_100_transformers_js_shards_are_written(tmp_path):
    """transformers.js loads up to 100 files: 100 shards are written and read back."""
    model = uint8_model(100, 100)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    out = tmp_path / "out"
    out.mkdir()
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        out / "model.onnx",
        options=onnxl.WriteOptions(max_shard_size=100, shard_naming="transformers.js"),
    )
    names = ["model.onnx_data"] + [f"model.onnx_data_{i}" for i in range(1, 100)]
    assert result.weights_paths == [str(out / n) for n in names]
    assert sorted(os.listdir(out)) == sorted(["model.onnx", *names])
    assert [loc for loc, _, _ in external_offsets(out / "model.onnx")] == names
    assert read_back(out / "model.onnx") == tensor_bytes(model)
    opts = onnxl.SerializeOptions(
        size_threshold=0, max_shard_size=100, shard_naming="transformers.js"
    )
    onnxl.save(model, out / "model.onnx", "model.onnx_data", options=opts)
    assert [loc for loc, _, _ in external_offsets(out / "model.onnx")] == names
    assert read_back(out / "model.onnx") == tensor_bytes(model)


@pytest.mark.parametrize("naming", [1, b"transformers.js", None, ["onnx-ir"]])
def test_shard_naming_that_is_not_a_string_is_a_type_error(tmp_path, naming):
    """A value of the wrong type raises TypeError, as the API page says of every setting;
    nothing is written."""
    save_two_file(uint8_model(3, 3000), tmp_path / "m.onnx", size_threshold=0)
    before = folder_digest(tmp_path)
    with pytest.raises(TypeError, match="shard_naming must be a str"):
        onnxl.SerializeOptions(shard_naming=naming)
    opts = onnxl.SerializeOptions()
    with pytest.raises(TypeError, match="shard_naming must be a str"):
        opts.shard_naming = naming
    assert opts.shard_naming == "onnx-ir"
    if naming is not None:  # align's default: onnx-ir, or in place the naming the model follows
        with pytest.raises(TypeError, match="shard_naming must be a str"):
            onnxl.align_external_data_streaming(
                tmp_path / "m.onnx",
                tmp_path / "a.onnx",
                options=onnxl.WriteOptions(max_shard_size=4000, shard_naming=naming),
            )
    assert folder_digest(tmp_path) == before
