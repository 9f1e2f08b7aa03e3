"""The source models of the benchmark: written once into a work dir, then only read.

Layout of the work dir, for each size name ``S``::

    two-S/model.onnx (+ model.onnx.data)   onnx.save(save_as_external_data=True), an
                                           8000-byte table first: no weight on a page
    single-S/model.onnx                    onnx.save, one file (single-file sizes only)
    aligned-S/model.onnx (+ .data)         align_external_data_streaming(two-S, 4096)
    forest-S/model.onnx                    a tree ensemble, metadata only (single-file sizes)
    many-S/model.onnx (+ .data)            200,000 tensors of 64 bytes (single-file sizes)
    quarter-S/model.onnx (+ .data)         a quarter as many
    pair-S/a.onnx, b.onnx (+ .data each)   two Gemm models (an 8000-byte table first)
                                           sharing 7/8 of their weights (pair sizes)
    twins-S/a.onnx, b.onnx (+ .data each)  200,000 tensors of 64 bytes in all, many
                                           twins within and across the two (pair sizes)
    twinsq-S/a.onnx, b.onnx (+ .data each) a quarter as many
    matmul-S/model.onnx (+ .data)          a chain of MatMul on float32 weights, written
                                           tensor by tensor (the quantize sizes)
    out/                                   scratch space of the workers

``manifest.json`` records what was written; a later run with the same
``--workdir`` reuses every source whose spec matches.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

MiB = 1024 * 1024

# name -> (n_weights, dim) of benchmarks.harness.make_gemm_model
SIZES = {
    "tiny": (2, 64),  # warm-up of every worker, never measured
    "2MiB": (8, 256),  # --smoke
    "96MiB": (24, 1024),
    "1GiB": (64, 2048),
    "2GiB": (128, 2048),
    "4GiB": (256, 2048),  # --large
    "8GiB": (512, 2048),  # the cgroup group: written tensor by tensor
}
# name -> (n_weights, dim) of the MatMul chains the quantizer reads: 16 x 4096² at 1 GiB
# (the memory proof's: 512 MiB, 2 GiB and 8 GiB, the same largest tensor)
MATMUL = {"tiny": (2, 128), "2MiB": (8, 256), "1GiB": (16, 4096)}
MATMUL.update({"256MiB": (4, 4096), "512MiB": (8, 4096), "2GiB": (32, 4096), "8GiB": (128, 4096)})
STREAM_ABOVE = 4 * 1024**3  # two-file sources larger than this are written tensor by tensor
CANARY = "canary.bin"  # the cold groups' canary: read before a copy, its residency after
# name -> nodes of benchmarks.harness.make_forest_model (500,000 nodes: about 21 MB)
FOREST_NODES = {"tiny": 2_000, "2MiB": 20_000}
FOREST_DEFAULT = 500_000
# name -> tensors of benchmarks.harness.make_many_tensors_model
MANY_TENSORS = {"tiny": 2_000, "2MiB": 8_000}
MANY_DEFAULT = 200_000
LEAD_TABLE = 8000  # bytes of the int64 table before the weights of the two-file sources
SINGLE_KINDS = ("single", "aligned", "forest", "many", "quarter")
# the dedup sources: pairs of models, written at the "pair" sizes
PAIR_KINDS = ("pair", "twins", "twinsq")
KINDS = ("two", *SINGLE_KINDS, *PAIR_KINDS, "matmul")
MANY_KINDS = ("many", "quarter", "twins", "twinsq")  # the per-tensor cost's sources
NEW_EVERY = 8  # b.onnx of a pair: weights (and biases) 0, 8, 16... differ from a.onnx's
TWIN_POOL = 8  # the twins pairs: n / 8 distinct byte strings for n tensors
ALIGNMENT = 4096
MODEL = "model.onnx"
DATA = "model.onnx.data"


@dataclass(frozen=True)
class Paths:
    """Where the sources of one size live (``single``/``aligned`` may not exist)."""

    root: str
    size: str

    @property
    def two(self) -> str:
        return os.path.join(self.root, f"two-{self.size}", MODEL)

    @property
    def two_data(self) -> str:
        return os.path.join(self.root, f"two-{self.size}", DATA)

    @property
    def single(self) -> str:
        return os.path.join(self.root, f"single-{self.size}", MODEL)

    @property
    def forest(self) -> str:
        return os.path.join(self.root, f"forest-{self.size}", MODEL)

    @property
    def aligned(self) -> str:
        return os.path.join(self.root, f"aligned-{self.size}", MODEL)

    @property
    def aligned_data(self) -> str:
        return os.path.join(self.root, f"aligned-{self.size}", DATA)

    @property
    def matmul(self) -> str:
        return os.path.join(self.root, f"matmul-{self.size}", MODEL)

    @property
    def matmul_data(self) -> str:
        return os.path.join(self.root, f"matmul-{self.size}", DATA)

    @property
    def many(self) -> str:
        return os.path.join(self.root, f"many-{self.size}", MODEL)

    @property
    def quarter(self) -> str:
        return os.path.join(self.root, f"quarter-{self.size}", MODEL)

    def models(self, kind: str) -> list[str]:
        """``[a.onnx, b.onnx]`` of a pair kind (among :data:`PAIR_KINDS`)."""
        folder = os.path.join(self.root, f"{kind}-{self.size}")
        return [os.path.join(folder, "a.onnx"), os.path.join(folder, "b.onnx")]

    def target(self, kind: str) -> str:
        """The model file of a kind (a pair's ``b.onnx``, written last)."""
        return self.models(kind)[1] if kind in PAIR_KINDS else getattr(self, kind)

    def datas(self, kind: str) -> list[str]:
        """The two weights files of a pair kind."""
        return [m + ".data" for m in self.models(kind)]

    def onnx_files(self, kind: str) -> list[str]:
        """The ``.onnx`` files of a kind (both models of a pair kind)."""
        return self.models(kind) if kind in PAIR_KINDS else [self.target(kind)]

    def tensors(self, kind: str) -> int:
        """How many tensors a kind of :data:`MANY_KINDS` holds (a pair's: both models')."""
        if kind not in MANY_KINDS:
            raise ValueError(f"{kind!r} is not a many-tensor kind")
        return _spec(self.size, kind)[0]

    @property
    def out(self) -> str:
        return os.path.join(self.root, "out")

    def files(self, kinds) -> list[str]:
        """Every existing file of the given kinds (among :data:`KINDS`)."""
        out = []
        for kind in kinds:
            folder = os.path.dirname(self.target(kind))
            if os.path.isdir(folder):
                out += [os.path.join(folder, f) for f in sorted(os.listdir(folder))]
        return [f for f in out if os.path.isfile(f)]


def _write(paths: Paths, kind: str, log) -> None:
    import onnx

    import onnx_light.onnx as onnxl
    from benchmarks.harness import make_gemm_model

    n, dim = SIZES.get(paths.size, (0, 0))  # the Gemm kinds (MatMul chains: MATMUL)
    target = paths.target(kind)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    t0 = time.perf_counter()
    if kind == "aligned":
        onnxl.align_external_data_streaming(paths.two, target, DATA, ALIGNMENT)
    elif kind == "forest":
        from benchmarks.harness import make_forest_model

        onnx.save(make_forest_model(_forest_nodes(paths.size)), target)
    elif kind == "pair":
        _write_pair(paths.models(kind), n, dim)
    elif kind in ("twins", "twinsq"):
        _write_twins(paths.models(kind), _spec(paths.size, kind)[0])
    elif kind == "matmul":
        _write_matmul(target, *MATMUL[paths.size])
    elif kind in ("many", "quarter"):
        from benchmarks.harness import make_many_tensors_model

        make_many_tensors_model(_spec(paths.size, kind)[0], os.path.dirname(target), MODEL)
    elif kind == "two" and n * dim * dim * 4 > STREAM_ABOVE:
        _write_two_streaming(target, n, dim)
    else:
        model = make_gemm_model(n, dim, lead_table=LEAD_TABLE if kind == "two" else 0)
        if kind == "two":
            onnx.save(model, target, save_as_external_data=True, location=DATA)
        else:
            onnx.save(model, target)
        del model
    log(f"  wrote {kind}-{paths.size} in {time.perf_counter() - t0:.1f} s")


def _external(t, location: str, offset: int, length: int) -> None:
    t.data_location = 1  # TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value


def _write_two_streaming(target: str, n: int, dim: int) -> None:
    """The two-file model of ``make_gemm_model(n, dim, lead_table=LEAD_TABLE)``, written
    tensor by tensor (the same bytes and layout as ``onnx.save``, one weight in memory
    at a time): a model larger than the memory can be written."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(0)
    scale = np.float32(1.0 / np.sqrt(dim))
    inits, nodes = [], []
    x = "X"
    with open(os.path.join(os.path.dirname(target), DATA), "wb") as f:

        def add(array, name):
            t = numpy_helper.from_array(array, name)
            offset = f.tell()
            f.write(t.raw_data)
            t.ClearField("raw_data")
            _external(t, DATA, offset, f.tell() - offset)
            inits.append(t)

        add(np.arange(LEAD_TABLE // 8, dtype=np.int64), "lead_table")
        for i in range(n):
            add((rng.standard_normal((dim, dim), dtype=np.float32) * scale), f"W{i}")
            add(rng.standard_normal(dim, dtype=np.float32) * np.float32(0.01), f"B{i}")
            y = "Y" if i == n - 1 else f"H{i}"
            nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"B{i}"], [y], name=f"gemm{i}"))
            x = y
    graph = helper.make_graph(
        nodes,
        "gemm_chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    save(model, target)


def _write_matmul(target: str, n: int, dim: int) -> None:
    """A chain of ``n`` MatMul nodes on ``[dim, dim]`` float32 weights (two files), written
    tensor by tensor: what the quantizer reads (its default op type is MatMul)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper, save

    rng = np.random.default_rng(43)
    scale = np.float32(1.0 / np.sqrt(dim))
    inits, nodes = [], []
    x = "X"
    with open(os.path.join(os.path.dirname(target), DATA), "wb") as f:
        for i in range(n):
            t = numpy_helper.from_array(
                rng.standard_normal((dim, dim), dtype=np.float32) * scale, f"W{i}"
            )
            offset = f.tell()
            f.write(t.raw_data)
            t.ClearField("raw_data")
            _external(t, DATA, offset, f.tell() - offset)
            inits.append(t)
            y = "Y" if i == n - 1 else f"H{i}"
            nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [y], name=f"matmul{i}"))
            x = y
    graph = helper.make_graph(
        nodes,
        "matmul_chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    save(model, target)


def ensure_canary(root: str, nbytes: int, log=print) -> str:
    """The canary file of ``nbytes`` random bytes in ``root`` (written once); its path."""
    path = os.path.join(root, CANARY)
    if os.path.exists(path) and os.path.getsize(path) == nbytes:
        return path
    t0 = time.perf_counter()
    block = os.urandom(min(nbytes, 16 * MiB))
    with open(path, "wb") as f:
        done = 0
        while done < nbytes:
            done += f.write(block[: nbytes - done])
    os.sync()
    log(f"  wrote the {nbytes / MiB:.0f} MiB canary in {time.perf_counter() - t0:.1f} s")
    return path


def _write_pair(models: list[str], n: int, dim: int) -> None:
    """Two two-file Gemm models sharing 7/8 of their weights, written tensor by tensor.

    ``a.onnx`` is ``make_gemm_model(n, dim)`` with an 8000-byte table first
    (dense, as ``onnx.save`` writes: no weight on a page); ``b.onnx`` is the
    same but weights and biases 0, 8, 16... (1 out of :data:`NEW_EVERY`),
    which get new random values. Both data files have one layout. Only the
    one model is in memory: each tensor is written to both files, then its
    ``raw_data`` dropped.
    """
    import numpy as np
    import onnx

    from benchmarks.harness import make_gemm_model

    model = make_gemm_model(n, dim, lead_table=LEAD_TABLE)
    rng = np.random.default_rng(19)
    a_loc, b_loc = (os.path.basename(m) + ".data" for m in models)
    changed = {f"{w}{i}" for i in range(0, n, NEW_EVERY) for w in "WB"}
    offset = 0
    with open(models[0] + ".data", "wb") as fa, open(models[1] + ".data", "wb") as fb:
        for t in model.graph.initializer:
            data = t.raw_data
            fa.write(data)
            if t.name in changed:
                fb.write(rng.standard_normal(len(data) // 4, dtype=np.float32).tobytes())
            else:
                fb.write(data)
            del data
            t.ClearField("raw_data")
            _external(t, a_loc, offset, fa.tell() - offset)
            offset = fa.tell()
    onnx.save(model, models[0])
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = b_loc
    onnx.save(model, models[1])


def _write_twins(models: list[str], n_tensors: int) -> None:
    """Two models of ``n_tensors // 2`` float32 tensors of 16 values each (64 bytes).

    Every tensor's bytes are one of ``n_tensors // TWIN_POOL`` random strings
    (picked at random): each string is held by about :data:`TWIN_POOL`
    tensors, within and across the two models. A 100-byte table comes first in
    each data file, so no tensor starts on a page; the references are set by
    hand, as :func:`benchmarks.harness.make_many_tensors_model` does.
    """
    import numpy as np
    from onnx import TensorProto, helper, save

    rng = np.random.default_rng(19)
    size, lead = 64, 100
    pool = rng.standard_normal((max(1, n_tensors // TWIN_POOL), size // 4), dtype=np.float32)
    for m, model_path in enumerate(models):
        count = n_tensors // 2
        picks = pool[rng.integers(0, len(pool), count)]
        location = os.path.basename(model_path) + ".data"
        inits = []
        for i in range(count):
            t = TensorProto(name=f"m{m}_t{i}", data_type=TensorProto.FLOAT, dims=[16])
            _external(t, location, lead + i * size, size)
            inits.append(t)
        out = helper.make_tensor_value_info(inits[0].name, TensorProto.FLOAT, [16])
        graph = helper.make_graph([], "twins", [], [out], inits)
        with open(model_path + ".data", "wb") as f:
            f.write(bytes(lead))
            f.write(picks.tobytes())
        save(helper.make_model(graph), model_path)


def _forest_nodes(size: str) -> int:
    return FOREST_NODES.get(size, FOREST_DEFAULT)


def _spec(size: str, kind: str) -> list:
    if kind == "forest":
        return [_forest_nodes(size)]
    if kind in MANY_KINDS:
        n = MANY_TENSORS.get(size, MANY_DEFAULT)
        spec = [n if kind in ("many", "twins") else n // 4]
        return spec + [TWIN_POOL] if kind.startswith("twins") else spec
    if kind == "pair":
        return [*SIZES[size], LEAD_TABLE, NEW_EVERY]
    if kind in ("two", "aligned"):
        return [*SIZES[size], LEAD_TABLE]
    if kind == "matmul":
        return [*MATMUL[size], "matmul"]
    return list(SIZES[size])


def _weight_bytes(size: str, kind: str) -> int:
    n, dim = MATMUL[size] if kind == "matmul" else SIZES[size]
    return n * dim * dim * 4


def ensure(
    root: str,
    two_file: list[str],
    single_file: list[str],
    log=print,
    pair: list[str] = (),
    matmul: list[str] = (),
) -> None:
    """Write the sources missing from ``root`` (two-file, single-file and aligned models).

    Args:
        root: the work dir.
        two_file: size names needing a two-file model.
        single_file: size names needing a single-file model, an aligned
            two-file one (made from the two-file model of the same size), a
            tree ensemble and the many-tensor models.
        log: where progress lines go.
        pair: size names needing the dedup sources (:data:`PAIR_KINDS`).
        matmul: size names needing a MatMul chain (:data:`MATMUL`), the quantizer's.
    """
    os.makedirs(os.path.join(root, "out"), exist_ok=True)
    manifest_path = os.path.join(root, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    wanted = [(s, "two") for s in set(two_file) | set(single_file) | {"tiny"}]
    wanted += [(s, k) for s in set(single_file) | {"tiny"} for k in SINGLE_KINDS]
    wanted += [(s, k) for s in set(pair) | ({"tiny"} if pair else set()) for k in PAIR_KINDS]
    wanted += [(s, "matmul") for s in set(matmul) | ({"tiny"} if matmul else set())]
    wanted.sort(key=lambda sk: (_weight_bytes(*sk), sk[1] == "aligned"))
    wrote = False
    for size, kind in wanted:
        key = f"{kind}-{size}"
        paths = Paths(root, size)
        if manifest.get(key) == _spec(size, kind) and os.path.exists(paths.target(kind)):
            continue
        _write(paths, kind, log)
        manifest[key] = _spec(size, kind)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1)
        wrote = True
    if wrote:
        os.sync()  # write the sources back now, not during the measurements


def nbytes(size: str) -> int:
    """Bytes of the weights of the Gemm models of size ``size``."""
    n, dim = SIZES[size]
    return n * dim * dim * 4


def copy_into(src_root: str, dst_root: str, sizes: list[str], kinds: list[str], log=print) -> None:
    """Copy sources written in ``src_root`` into ``dst_root`` (another filesystem).

    Args:
        src_root: a work dir prepared by :func:`ensure`.
        dst_root: the work dir on the other filesystem (created).
        sizes: size names to copy (``tiny`` is always copied, for the warm-up).
        kinds: kinds to copy, among :data:`KINDS`.
        log: where progress lines go.
    """
    import shutil

    os.makedirs(os.path.join(dst_root, "out"), exist_ok=True)
    t0 = time.perf_counter()
    for size in sorted(set(sizes) | {"tiny"}):
        for kind in kinds:
            folder = f"{kind}-{size}"
            src = os.path.join(src_root, folder)
            if os.path.isdir(src) and not os.path.isdir(os.path.join(dst_root, folder)):
                shutil.copytree(src, os.path.join(dst_root, folder))
    os.sync()
    log(f"  copied {', '.join(kinds)} into {dst_root} in {time.perf_counter() - t0:.1f} s")
