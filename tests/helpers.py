"""Model builders and checks the tests share (plain functions; the fixtures are in conftest.py).

Imported as ``from helpers import ...`` from ``tests/`` and its subfolders
(pytest's ``pythonpath`` setting puts ``tests/`` on the path).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from packaging.version import Version

DIM = 256


def _arr(rng, *shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 0.05).astype(dtype)


def make_runnable_model(seed: int = 0) -> onnx.ModelProto:
    """A model onnxruntime runs, with tensors of many kinds, all >= 1 KiB.

    Initializers (Gemm), a Constant's ``value`` attribute, a sparse
    initializer, an If whose branches hold a Constant and a subgraph
    initializer, and a local function whose body holds a Constant.
    """
    rng = np.random.default_rng(seed)
    d = DIM
    w0, b0 = _arr(rng, d, d), _arr(rng, d)
    dense = np.zeros((d, d), np.float32)
    flat = rng.choice(d * d, 400, replace=False)
    flat.sort()
    dense.flat[flat] = _arr(rng, 400)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(dense.flat[flat].astype(np.float32), "SW"),
        numpy_helper.from_array(flat.astype(np.int64), "SW_idx"),
        [d, d],
    )
    then_g = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["T2"], value=numpy_helper.from_array(_arr(rng, d), "T2v")
            ),
            helper.make_node("Add", ["H2", "T2"], ["then_out"]),
        ],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, [2, d])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["H2", "T3"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, [2, d])],
        [numpy_helper.from_array(_arr(rng, d), "T3")],
    )
    fn = helper.make_function(
        "local",
        "AddBias",
        ["x"],
        ["y"],
        [
            helper.make_node(
                "Constant", [], ["c"], value=numpy_helper.from_array(_arr(rng, d), "T4")
            ),
            helper.make_node("Add", ["x", "c"], ["y"]),
        ],
        [helper.make_opsetid("", 18)],
    )
    nodes = [
        helper.make_node("Gemm", ["X", "W0", "B0"], ["H0"]),
        helper.make_node("Constant", [], ["C1"], value=numpy_helper.from_array(_arr(rng, d), "T1")),
        helper.make_node("Add", ["H0", "C1"], ["H1"]),
        helper.make_node("MatMul", ["H1", "SW"], ["H2"]),
        helper.make_node("If", ["cond"], ["H3"], then_branch=then_g, else_branch=else_g),
        helper.make_node("AddBias", ["H3"], ["Y"], domain="local"),
    ]
    graph = helper.make_graph(
        nodes,
        "kinds",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, d]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, d])],
        [numpy_helper.from_array(w0, "W0"), numpy_helper.from_array(b0, "B0")],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    model.ir_version = 9
    return model


def uint8_model(n: int = 3, size: int = 5000, seed: int = 0, prefix: str = "W") -> onnx.ModelProto:
    """``n`` uint8 initializers ``{prefix}0``... of ``size`` random bytes, no node."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.integers(0, 255, size, dtype=np.uint8), f"{prefix}{i}")
        for i in range(n)
    ]
    return helper.make_model(helper.make_graph([], "g", [], [], inits))


def make_every_kind_model(seed: int = 0) -> onnx.ModelProto:
    """A model (not meant to run) with a tensor in every place the walker knows."""
    model = make_runnable_model(seed)
    rng = np.random.default_rng(seed + 1)
    sp = helper.make_sparse_tensor(
        numpy_helper.from_array(_arr(rng, 300), "spv"),
        numpy_helper.from_array(np.arange(300, dtype=np.int64), "spi"),
        [1000],
    )
    inner = helper.make_graph(
        [
            helper.make_node(
                "Constant", [], ["deep"], value=numpy_helper.from_array(_arr(rng, 300), "deep_t")
            )
        ],
        "inner",
        [],
        [helper.make_tensor_value_info("deep", TensorProto.FLOAT, [300])],
        [numpy_helper.from_array(_arr(rng, 400), "inner_init")],
    )
    node = helper.make_node("Custom", [], ["z"], domain="custom")
    node.attribute.extend(
        [
            helper.make_attribute(
                "ts", [numpy_helper.from_array(_arr(rng, 300), f"list{i}") for i in range(2)]
            ),
            helper.make_attribute("sp", sp),
            helper.make_attribute("sps", [sp]),
            helper.make_attribute("gs", [inner]),
            helper.make_attribute("tiny", numpy_helper.from_array(np.ones(3, np.float32), "tiny")),
        ]
    )
    model.graph.node.append(node)
    ti = model.training_info.add()
    ti.initialization.CopyFrom(
        helper.make_graph(
            [], "init", [], [], [numpy_helper.from_array(_arr(rng, 500), "train_init")]
        )
    )
    return model


def tensor_bytes(model: onnx.ModelProto) -> dict:
    """{(path, name): raw bytes} of every tensor of a fully loaded model."""
    from onnx_light.onnx._read.tensors import iter_tensors, path_to_str

    out = {}
    for site in iter_tensors(model):
        t = site.tensor
        out[path_to_str(site.path)] = numpy_helper.to_array(t).tobytes()
    return out


def read_back(path) -> dict:
    """{path: bytes} of every tensor of the model at ``path``, read independently.

    onnx.load leaves sparse tensors external, so external bytes are read here
    with plain file reads, independent of onnx-light.
    """
    from onnx_light.onnx._read.tensors import is_external, iter_tensors, path_to_str

    folder = os.path.dirname(str(path))
    model = onnx.load(str(path), load_external_data=False)
    out = {}
    for site in iter_tensors(model):
        t = site.tensor
        if is_external(t):
            e = {x.key: x.value for x in t.external_data}
            with open(os.path.join(folder, e["location"]), "rb") as f:
                f.seek(int(e.get("offset", 0)))
                data = f.read(int(e["length"])) if "length" in e else f.read()
            del t.external_data[:]
            t.ClearField("data_location")
            t.raw_data = data
        out[path_to_str(site.path)] = numpy_helper.to_array(t).tobytes()
    return out


def peak_growth_in_subprocess(script: str, *args) -> int:
    """Run ``script`` (which prints ``growth exact``) in a fresh interpreter.

    Returns:
        The peak RSS growth it measured, in bytes; skips the test where the
        kernel does not let VmHWM be reset.
    """
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, check=True
    ).stdout.split()
    if out[1] != "True":
        pytest.skip("the kernel does not let VmHWM be reset here")
    return int(out[0])


def sha256(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def folder_digest(folder) -> dict:
    """{file name: sha256} of every file in ``folder``."""
    return {n: sha256(os.path.join(folder, n)) for n in sorted(os.listdir(folder))}


def run_ort(path, model_inputs=None):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    feeds = model_inputs or {
        "X": rng.standard_normal((2, DIM)).astype(np.float32),
        "cond": np.array(True),
    }
    return sess.run(None, feeds)


def onnxruntime_version() -> Version | None:
    """The installed onnxruntime's version (None: not installed), read without importing it."""
    try:
        return Version(importlib.metadata.version("onnxruntime"))
    except importlib.metadata.PackageNotFoundError:
        return None


def onnxruntime_older_than(since: str) -> bool:
    """True when onnxruntime is installed at a version before ``since``."""
    installed = onnxruntime_version()
    return installed is not None and installed < Version(since)


@functools.cache
def onnxruntime_ir_version() -> int:
    """The newest IR version the installed onnxruntime reads (11 for 1.23, 13 for 1.24).

    onnxruntime exposes no such number: a one-node model is offered at each IR
    version from onnx's own down, and the first one loaded is the answer.
    """
    import onnxruntime as ort

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
    probe = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    for ir_version in range(onnx.IR_VERSION, 7, -1):
        probe.ir_version = ir_version
        try:
            ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        except Exception:  # onnxruntime's own Fail: "Unsupported model IR version: ..."
            continue
        return ir_version
    raise RuntimeError(f"onnxruntime {ort.__version__} reads no IR version from 8 up")


def for_onnxruntime(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` at an IR version the installed onnxruntime reads, returned.

    ``helper.make_model`` stamps onnx's newest IR version, which an older
    onnxruntime refuses (1.23, the newest for Python 3.10, reads 11 at most);
    the version is lowered only as far as the installed onnxruntime needs, so
    a newer one runs the model as built (and without onnxruntime, nothing changes).
    """
    if onnxruntime_version() is not None:
        model.ir_version = min(model.ir_version, onnxruntime_ir_version())
    return model


# What onnxruntime's float16 converter (onnxruntime.transformers.float16) changed, and
# when: the tests comparing graphs with it need the version they were written against.
FLOAT16_CONVERTER_CHANGES = {
    "1.25": "names each Cast after the value it casts and keeps Resize-10's scales float",
    "1.31": "gives a ConstantOfShape without a value a float16 zero",
    "1.32": "adds one Cast per value and type, shared by its consumers",
}


def float16_converter_since(since: str) -> pytest.MarkDecorator:
    """Skip a comparison with onnxruntime's float16 converter where it predates ``since``.

    ``since`` is a key of :data:`FLOAT16_CONVERTER_CHANGES`: the older converter
    builds a different graph by design, so comparing with it would fail for
    that reason alone.
    """
    change = FLOAT16_CONVERTER_CHANGES[since]
    return pytest.mark.skipif(
        onnxruntime_older_than(since),
        reason=f"onnxruntime {onnxruntime_version()}'s float16 converter differs by design "
        f"(since {since}, it {change}): the comparison needs onnxruntime >= {since}",
    )


def external_offsets(path) -> list[tuple[str, int, int]]:
    """(location, offset, length) of every external tensor of the model at ``path``."""
    from onnx_light.onnx._read.tensors import is_external, iter_tensors

    model = onnx.load(str(path), load_external_data=False)
    out = []
    for site in iter_tensors(model):
        if is_external(site.tensor):
            e = {x.key: x.value for x in site.tensor.external_data}
            out.append((e["location"], int(e.get("offset", 0)), int(e["length"])))
    return out


def save_two_file(model, path, location=None, size_threshold=1024, per_tensor=False):
    """Save a deep copy of ``model`` with onnx as a two-file (or per-tensor) model."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save(
        copy,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=not per_tensor,
        location=None if per_tensor else (location or os.path.basename(str(path)) + ".data"),
        size_threshold=size_threshold,
        convert_attribute=True,
    )


def two_file_pair(tmp_path, n: int = 3, size: int = 5000):
    """A two-file model m.onnx + m.onnx.data of ``uint8_model(n, size)`` in tmp_path/src.

    Returns:
        ``(path of m.onnx, tensor_bytes of the model, folder_digest of tmp_path/src)``.
    """
    folder = tmp_path / "src"
    folder.mkdir()
    model = uint8_model(n, size)
    save_two_file(model, folder / "m.onnx", size_threshold=0)
    return folder / "m.onnx", tensor_bytes(model), folder_digest(folder)


def external_tensor(name: str, location: str, offset: str, length: int) -> onnx.TensorProto:
    """A uint8 tensor of ``length`` values stored in ``location`` at ``offset`` (as written)."""
    t = onnx.TensorProto(name=name, data_type=onnx.TensorProto.UINT8, dims=[length])
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def model_from_initializer_bytes(folder, tensor_bytes_: bytes, name: str = "m.onnx"):
    """Write a model whose single initializer is given as serialized bytes; return its path."""
    from onnx_light.onnx._read.wire import encode_varint

    graph = helper.make_graph([], "g", [], [])
    model = helper.make_model(graph)
    data = model.SerializeToString()
    init = encode_varint(5 << 3 | 2) + encode_varint(len(tensor_bytes_)) + tensor_bytes_
    graph_bytes = graph.SerializeToString() + init
    model_bytes = data.replace(
        encode_varint(7 << 3 | 2)
        + encode_varint(len(graph.SerializeToString()))
        + graph.SerializeToString(),
        encode_varint(7 << 3 | 2) + encode_varint(len(graph_bytes)) + graph_bytes,
    )
    path = folder / name
    path.write_bytes(model_bytes)
    return path


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """Run the onnx-light command on ``args``: ``(exit code, stdout, stderr)``."""
    from onnx_light.cli import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_failure(code: int, err: str) -> None:
    """A failed command: exit code 1 or 2, one line on stderr, no traceback."""
    assert code in (1, 2), code
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def write_safetensors(path, arrays: dict) -> None:
    """A ``.safetensors`` file written by hand as the format says (no dependency)."""
    import json
    import struct

    codes = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64", np.dtype(np.float16): "F16"}
    header, offset, blobs = {}, 0, []
    for name, arr in arrays.items():
        data = np.ascontiguousarray(arr).tobytes()
        header[name] = {
            "dtype": codes[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def external_places(path) -> dict[str, tuple[str, int, int]]:
    """{initializer name: (location, offset, length)} of the external initializers."""
    model = onnx.load(str(path), load_external_data=False)
    out = {}
    for t in model.graph.initializer:
        e = {x.key: x.value for x in t.external_data}
        if e:
            out[t.name] = (e["location"], int(e.get("offset", 0)), int(e["length"]))
    return out


def hf_snapshot(root, layout: str):
    """A Hugging Face hub cache: snapshots/<rev>/onnx/model.onnx (+ model.onnx_data).

    ``layout``: "both-linked" (both files symlinks into blobs/), "onnx-linked"
    (the .onnx a symlink, the data a plain file beside it) or "nested" (both
    linked, one folder deeper).

    Returns:
        ``(path of the snapshot's model.onnx, tensor_bytes of the model)``.
    """
    model = uint8_model()
    work = root / "work"
    work.mkdir()
    save_two_file(model, work / "model.onnx", location="model.onnx_data", size_threshold=0)
    repo = root / "models--org--name"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    sub = "onnx/decoder" if layout == "nested" else "onnx"
    snap = repo / "snapshots" / "0123abcd" / sub
    snap.mkdir(parents=True)
    up = os.path.relpath(blobs, snap)
    os.replace(work / "model.onnx", blobs / "aaaa1111")
    os.symlink(os.path.join(up, "aaaa1111"), snap / "model.onnx")
    if layout == "onnx-linked":
        os.replace(work / "model.onnx_data", snap / "model.onnx_data")
    else:
        os.replace(work / "model.onnx_data", blobs / "bbbb2222")
        os.symlink(os.path.join(up, "bbbb2222"), snap / "model.onnx_data")
    return snap / "model.onnx", tensor_bytes(model)


# the settings every writer takes in options=WriteOptions(...)
WRITE_SETTINGS = frozenset(
    {
        "alignment",
        "size_threshold",
        "max_shard_size",
        "shard_naming",
        "chunk_size",
        "num_threads",
        "durable",
        "drop_behind",
        "remove_unreferenced",
        "progress",
    }
)


def as_options(kwargs: dict, keep=()) -> dict:
    """A writer's keywords with its settings moved into ``options=WriteOptions(...)``
    (building it checks them, as the writer does); those named in ``keep`` stay
    keywords (``align_external_data_streaming``'s ``alignment`` and ``chunk_size``,
    which the original API passes)."""
    from onnx_light.onnx import WriteOptions

    moved = {k: v for k, v in kwargs.items() if k in WRITE_SETTINGS and k not in keep}
    rest = {k: v for k, v in kwargs.items() if k not in moved}
    return {**rest, "options": WriteOptions(**moved)} if moved else rest
