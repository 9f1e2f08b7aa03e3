"""The measured operations, one function each, used by ``worker.py``.

``OPS[name](paths, out)`` does the set-up that is not measured (e.g. loading
the model a save starts from) and returns a :class:`Case`: ``run()`` is the
measured operation; ``outputs`` are the files it writes (their sizes are the
"bytes written", unless ``nbytes`` says otherwise); ``cleanup()`` removes what it
wrote outside ``out``. An operation on the many-tensor sources also says how
many tensors it handles and the size of the ``.onnx`` files it reads
(``tensors``, ``onnx_bytes``: the per-tensor cost and the memory target of
the rows on them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx_ir.passes.common import DeduplicateInitializersPass
from peers import IR_ALIGN, IR_DEDUP, IR_SAVE, ONNX_SAVE
from sources import ALIGNMENT, DATA, MODEL, NEW_EVERY, Paths

import onnx_light.cli
import onnx_light.onnx as onnxl

NEW_WEIGHT_EVERY = 8  # the shared-save variant replaces 1 weight out of 8


@dataclass
class Case:
    run: Callable[[], object]
    outputs: list[str] = field(default_factory=list)
    cleanup: Callable[[], None] | None = None
    nbytes: int | None = None  # the "bytes" figure when it is not the outputs' sizes
    tensors: int | None = None  # tensors handled (the many-tensor sources)
    onnx_bytes: int | None = None  # size of the .onnx files read (the many-tensor sources)


def _on_many(case: Case, p: Paths, kind: str) -> Case:
    """``case`` with the tensors and ``.onnx`` bytes of the many-tensor source ``kind``."""
    case.tensors = p.tensors(kind)
    case.onnx_bytes = sum(os.path.getsize(f) for f in p.onnx_files(kind))
    return case


def _options() -> onnxl.SerializeOptions:
    opts = onnxl.SerializeOptions()
    opts.alignment = ALIGNMENT
    return opts


def copyfile(p: Paths, out: str) -> Case:
    """Kernel copy of the ``.data`` file (the floor of any re-alignment)."""
    dst = os.path.join(out, DATA)
    return Case(lambda: shutil.copyfile(p.two_data, dst), [dst])


def copyfile_aligned(p: Paths, out: str) -> Case:
    """Kernel copy of the aligned source's ``.data`` (which XFS and btrfs may share)."""
    dst = os.path.join(out, DATA)
    return Case(lambda: shutil.copyfile(p.aligned_data, dst), [dst])


def _light_align(src: str, out: str) -> Case:
    dst = os.path.join(out, MODEL)
    return Case(
        lambda: onnxl.align_external_data_streaming(src, dst, DATA, ALIGNMENT),
        [dst, os.path.join(out, DATA)],
    )


def _ir_align(src: str, out: str) -> Case:
    dst = os.path.join(out, MODEL)

    def run():
        model = ir.load(src)
        ir.save(
            model,
            dst,
            external_data=DATA,
            size_threshold_bytes=1024,
            alignment=ALIGNMENT,
            align_threshold=0,
            **IR_ALIGN,
        )

    return Case(run, [dst, os.path.join(out, DATA)])


def align(p: Paths, out: str) -> Case:
    """onnx-light: streaming re-alignment to 4096, weights never loaded."""
    return _light_align(p.two, out)


def ir_align(p: Paths, out: str) -> Case:
    """onnx-ir: ``ir.load`` + ``ir.save(alignment=4096)``, the same layout as ``align``."""
    return _ir_align(p.two, out)


def align_aligned(p: Paths, out: str) -> Case:
    """onnx-light: re-align a source whose weights already start on 4096-byte boundaries."""
    return _light_align(p.aligned, out)


def ir_align_aligned(p: Paths, out: str) -> Case:
    """onnx-ir: ``ir.load`` + ``ir.save(alignment=4096)`` of the aligned source."""
    return _ir_align(p.aligned, out)


def align_many(p: Paths, out: str) -> Case:
    """onnx-light: re-align 200,000 tensors of 64 bytes."""
    return _on_many(_light_align(p.many, out), p, "many")


def align_quarter(p: Paths, out: str) -> Case:
    """onnx-light: re-align a quarter as many (50,000): time must scale linearly."""
    return _on_many(_light_align(p.quarter, out), p, "quarter")


def ir_align_many(p: Paths, out: str) -> Case:
    """onnx-ir: ``ir.load`` + ``ir.save(alignment=4096)`` of the 200,000 tensors."""
    return _on_many(_ir_align(p.many, out), p, "many")


def _floor(p: Paths, out: str, kind: str, touch: Callable[[onnx.ModelProto], None] | None):
    """Each ``.onnx`` file of ``kind`` read and parsed by protobuf
    (``ModelProto.ParseFromString``), ``touch(model)`` on each, then each serialized
    again and written into a new file; no onnx.load, no external data. A pair's two
    models are held parsed together, as a dedup that writes both outputs in one commit
    holds them."""
    srcs = p.onnx_files(kind)
    dsts = [os.path.join(out, os.path.basename(f)) for f in srcs]

    def run():
        models = []
        for src in srcs:
            with open(src, "rb") as f:
                data = f.read()
            models.append(onnx.ModelProto())
            models[-1].ParseFromString(data)
            del data
        if touch is not None:
            for model in models:
                touch(model)
        for model, dst in zip(models, dsts, strict=True):
            with open(dst, "wb") as f:
                f.write(model.SerializeToString())

    return _on_many(Case(run, dsts), p, kind)


def _floor_meta(p: Paths, out: str, kind: str) -> Case:
    """The metadata floor of a job on the ``.onnx`` files of ``kind``: parsed and
    written again (:func:`_floor`), nothing else."""
    return _floor(p, out, kind, None)


def _touch_every_tensor(model: onnx.ModelProto) -> None:
    """Read every initializer's entries (key and value), dtype and dims, and write a new
    offset (aligned to 4096)."""
    offset = 0
    for tensor in model.graph.initializer:
        entries = tensor.external_data[:]
        {entry.key: entry.value for entry in entries}
        tensor.data_type, tensor.dims[:]
        entries[1].value = str(offset)
        offset += ALIGNMENT


def _floor_access(p: Paths, out: str, kind: str) -> Case:
    """The per-tensor floor of protobuf's Python API on the ``.onnx`` files of ``kind``:
    the metadata floor, plus, for every initializer, what any tool that rewrites its
    reference through protobuf's objects must do at the least
    (:func:`_touch_every_tensor`). No check, no object kept per tensor: the cost of
    touching a tensor from Python, once."""
    return _floor(p, out, kind, _touch_every_tensor)


def floor_access_many(p: Paths, out: str) -> Case:
    """The per-tensor floor of protobuf's Python API, 200,000 tensors."""
    return _floor_access(p, out, "many")


def floor_access_twins(p: Paths, out: str) -> Case:
    """The per-tensor floor of protobuf's Python API on the twins pair."""
    return _floor_access(p, out, "twins")


def floor_meta_many(p: Paths, out: str) -> Case:
    """The metadata floor of the 200,000-tensor model."""
    return _floor_meta(p, out, "many")


def floor_meta_quarter(p: Paths, out: str) -> Case:
    """The metadata floor of the 50,000-tensor model."""
    return _floor_meta(p, out, "quarter")


def floor_meta_twins(p: Paths, out: str) -> Case:
    """The metadata floor of the twins pair (both ``.onnx``, 200,000 tensors in all)."""
    return _floor_meta(p, out, "twins")


def floor_meta_twinsq(p: Paths, out: str) -> Case:
    """The metadata floor of the quarter twins pair (50,000 tensors in all)."""
    return _floor_meta(p, out, "twinsq")


def _cli(p: Paths, kind: str, command: str) -> Case:
    """``onnx-light COMMAND MODEL`` run in this process (``onnx_light.cli.main``), its
    output written to ``/dev/null``; a non-zero exit code is an error of the row."""
    src = getattr(p, kind)

    def run():
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            code = onnx_light.cli.main([command, src])
        if code != 0:
            raise RuntimeError(f"onnx-light {command} {src}: exit code {code}")

    return _on_many(Case(run, nbytes=0), p, kind)


def info_many(p: Paths, out: str) -> Case:
    """``onnx-light info`` of the 200,000-tensor model (its table of every tensor)."""
    return _cli(p, "many", "info")


def info_quarter(p: Paths, out: str) -> Case:
    """``onnx-light info`` of the 50,000-tensor model."""
    return _cli(p, "quarter", "info")


def verify_many(p: Paths, out: str) -> Case:
    """``onnx-light verify`` of the 200,000-tensor model (every reference checked)."""
    return _cli(p, "many", "verify")


def verify_quarter(p: Paths, out: str) -> Case:
    """``onnx-light verify`` of the 50,000-tensor model."""
    return _cli(p, "quarter", "verify")


def onnx_loadsave(p: Paths, out: str) -> Case:
    """onnx: ``onnx.load`` + ``onnx.save(save_as_external_data=True)`` (no alignment)."""
    dst = os.path.join(out, MODEL)

    def run():
        model = onnx.load(p.two)
        onnx.save(model, dst, save_as_external_data=True, location=DATA, **ONNX_SAVE)

    return Case(run, [dst, os.path.join(out, DATA)])


def light_loadsave(p: Paths, out: str) -> Case:
    """onnx-light: ``load`` (weights in memory) + ``save(alignment=4096)``."""
    dst = os.path.join(out, MODEL)

    def run():
        model = onnxl.load(p.two)
        onnxl.save(model, dst, DATA, options=_options())

    return Case(run, [dst, os.path.join(out, DATA)])


def light_save(p: Paths, out: str) -> Case:
    """onnx-light: ``save(alignment=4096)`` of the two-file model loaded in memory."""
    model = onnxl.load(p.two)
    dst = os.path.join(out, MODEL)
    return Case(
        lambda: onnxl.save(model, dst, DATA, options=_options()), [dst, os.path.join(out, DATA)]
    )


def onnx_save(p: Paths, out: str) -> Case:
    """onnx: ``onnx.save(save_as_external_data=True)`` of the same model in memory."""
    model = onnx.load(p.two)
    dst = os.path.join(out, MODEL)
    return Case(
        lambda: onnx.save(model, dst, save_as_external_data=True, location=DATA, **ONNX_SAVE),
        [dst, os.path.join(out, DATA)],
    )


def floor_write(p: Paths, out: str) -> Case:
    """The floor of any save: the weights' bytes, held in one buffer, written into a
    new preallocated file (16 MiB per ``pwrite``)."""
    from onnx_light.onnx._system.files import preallocate

    total = os.path.getsize(p.two_data)
    buf = memoryview(bytearray(os.urandom(1 << 20)) * (total // (1 << 20) + 1))[:total]
    dst = os.path.join(out, DATA)
    step = 16 << 20

    def run():
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            preallocate(fd, 0, total)
            for off in range(0, total, step):
                os.pwrite(fd, buf[off : off + step], off)
        finally:
            os.close(fd)

    return Case(run, [dst])


def ir_save(p: Paths, out: str) -> Case:
    """onnx-ir: ``ir.save(alignment=4096)`` of the same model, its tensors in memory."""
    model = ir.serde.deserialize_model(onnx.load(p.two))
    dst = os.path.join(out, MODEL)

    def run():
        ir.save(
            model,
            dst,
            external_data=DATA,
            size_threshold_bytes=1024,
            alignment=ALIGNMENT,
            align_threshold=0,
            **IR_SAVE,
        )

    return Case(run, [dst, os.path.join(out, DATA)])


def floor_copy(p: Paths, out: str) -> Case:
    """The floor of any load returning a ModelProto: ``tensor.raw_data = data`` for
    every weight, its bytes already read (protobuf's copy, under the GIL)."""
    model = onnx.load(p.two, load_external_data=False)
    tensors, blobs = [], []
    with open(p.two_data, "rb") as f:
        for t in model.graph.initializer:
            entries = {e.key: e.value for e in t.external_data}
            if not entries:
                continue  # small tensors stay inline
            f.seek(int(entries.get("offset", 0)))
            blobs.append(f.read(int(entries["length"])))
            tensors.append(t)

    def run():
        for t, data in zip(tensors, blobs, strict=True):
            t.raw_data = data

    return Case(run)


def onnx_load(p: Paths, out: str) -> Case:
    """onnx: ``onnx.load`` of the two-file model."""
    return Case(lambda: onnx.load(p.two))


def light_load2(p: Paths, out: str) -> Case:
    """onnx-light: ``load(num_threads=2)`` of the two-file model."""
    return Case(lambda: onnxl.load(p.two, num_threads=2))


def _variant(p: Paths, load_external_data: bool) -> onnx.ModelProto:
    """The two-file model with 1 weight out of 8 replaced by new inline values."""
    model = onnxl.load(p.two, load_external_data=load_external_data)
    rng = np.random.default_rng(123)
    weights = [t for t in model.graph.initializer if t.name.startswith("W")]
    for t in weights[::NEW_WEIGHT_EVERY]:
        shape = tuple(t.dims)
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT
        t.raw_data = rng.standard_normal(shape, dtype=np.float32).tobytes()
    return model


def shared_save(p: Paths, out: str) -> Case:
    """onnx-light: ``save_model_with_shared_external_data`` of the variant.

    The variant keeps pointing at the source's ``.data``, so it is saved next
    to it (under a unique name, removed afterwards).
    """
    model = _variant(p, load_external_data=False)
    dst = os.path.join(os.path.dirname(p.two), f"variant-{os.getpid()}.onnx")
    outputs = [dst, dst + ".data"]

    def cleanup():
        for f in outputs:
            with contextlib.suppress(FileNotFoundError):
                os.remove(f)

    return Case(
        lambda: onnxl.save_model_with_shared_external_data(model, dst, options=_options()),
        outputs,
        cleanup,
    )


def full_save(p: Paths, out: str) -> Case:
    """onnx-light: ``save(alignment=4096)`` of the same variant, every weight in memory."""
    model = _variant(p, load_external_data=True)
    dst = os.path.join(out, "variant.onnx")
    return Case(
        lambda: onnxl.save(model, dst, "variant.onnx.data", options=_options()),
        [dst, dst + ".data"],
    )


def skip_load(p: Paths, out: str) -> Case:
    """onnx-light: ``load(skip_raw_data=True)`` of the single-file model."""
    return Case(lambda: onnxl.load(p.single, load_external_data=False, skip_raw_data=True))


def onnx_load_single(p: Paths, out: str) -> Case:
    """onnx: ``onnx.load`` of the single-file model."""
    return Case(lambda: onnx.load(p.single))


def forest_scan(p: Paths, out: str) -> Case:
    """onnx-light: ``load(skip_raw_data=True)`` of a tree ensemble (millions of fields)."""
    return Case(lambda: onnxl.load(p.forest, load_external_data=False, skip_raw_data=True))


def onnx_load_forest(p: Paths, out: str) -> Case:
    """onnx: ``onnx.load(load_external_data=False)`` of the same tree ensemble."""
    return Case(lambda: onnx.load(p.forest, load_external_data=False))


def align_single(p: Paths, out: str) -> Case:
    """onnx-light: re-align the single-file model (its inline weights move, streamed)."""
    return _light_align(p.single, out)


def ir_align_single(p: Paths, out: str) -> Case:
    """onnx-ir: ``ir.load`` + ``ir.save(alignment=4096)`` of the single-file model."""
    return _ir_align(p.single, out)


def _session(path: str):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_prepacking", "1")
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_aligned(p: Paths, out: str) -> Case:
    """onnxruntime: session from the aligned two-file model, prepacking disabled."""
    return Case(lambda: _session(p.aligned))


def ort_single(p: Paths, out: str) -> Case:
    """onnxruntime: session from the single-file model, prepacking disabled."""
    return Case(lambda: _session(p.single))


DEDUP_WEIGHTS = "weights.data"


# -- cold, larger than memory, durable ---------------------------------


def cp(p: Paths, out: str) -> Case:
    """coreutils ``cp`` of the ``.data`` (``copy_file_range`` in the kernel)."""
    dst = os.path.join(out, DATA)
    return Case(lambda: subprocess.run(["cp", p.two_data, dst], check=True), [dst])


def _light_align_with(src: str, out: str, **settings) -> Case:
    dst = os.path.join(out, MODEL)
    opts = onnxl.WriteOptions(**settings)
    return Case(
        lambda: onnxl.align_external_data_streaming(src, dst, DATA, ALIGNMENT, options=opts),
        [dst, os.path.join(out, DATA)],
    )


def align_drop(p: Paths, out: str) -> Case:
    """onnx-light: the re-align with ``drop_behind=True``."""
    return _light_align_with(p.two, out, drop_behind=True)


def align_durable(p: Paths, out: str) -> Case:
    """onnx-light: the re-align with ``durable=True`` (new folder)."""
    return _light_align_with(p.two, out, durable=True)


@contextlib.contextmanager
def _readahead_hints(mode: str):
    """The copy engine, patched to advise the kernel about the source before each range:
    ``sequential`` (``POSIX_FADV_SEQUENTIAL`` on the whole source, once) or
    ``willneed`` (``POSIX_FADV_WILLNEED`` on the range after the one being copied)."""
    from onnx_light.onnx._write import copy as _copy

    original = _copy.CopyEngine.copy
    advised: set[int] = set()

    def copy(self, src, src_off, dst, dst_off, length, what):
        if mode == "sequential" and src not in advised:
            os.posix_fadvise(src, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            advised.add(src)
        elif mode == "willneed":
            os.posix_fadvise(src, src_off, 2 * length, os.POSIX_FADV_WILLNEED)
        return original(self, src, src_off, dst, dst_off, length, what)

    _copy.CopyEngine.copy = copy
    try:
        yield
    finally:
        _copy.CopyEngine.copy = original


def _hinted(mode: str) -> Callable[[Paths, str], Case]:
    def make(p: Paths, out: str) -> Case:
        case = _light_align(p.two, out)
        run = case.run

        def hinted():
            with _readahead_hints(mode):
                return run()

        case.run = hinted
        return case

    return make


def floor_device(p: Paths, out: str) -> Case:
    """The device's floor for a copy of the ``.data``: read it once and write as many
    bytes once, both with direct I/O (no page cache), with ``fio`` (1 MiB blocks, 16
    in flight) if installed, else ``dd`` (16 MiB blocks)."""
    total = os.path.getsize(p.two_data)
    # whole MiB (whole pages below one), as direct I/O needs: the tail is under 1 MiB
    size = total // (1 << 20) << 20 or total // 4096 * 4096
    dst = os.path.join(out, DATA)
    if shutil.which("fio"):
        block = "1M" if size % (1 << 20) == 0 else "4k"
        common = [f"--bs={block}", "--direct=1", "--ioengine=libaio", "--iodepth=16"]
        common += ["--output-format=terse", f"--size={size}"]
        cmds = [
            ["fio", "--name=read", f"--filename={p.two_data}", "--rw=read", *common],
            ["fio", "--name=write", f"--filename={dst}", "--rw=write", *common],
        ]
    else:
        block = 16 << 20 if size % (16 << 20) == 0 else 4096
        dd = [f"bs={block}", f"count={size // block}"]
        cmds = [
            ["dd", f"if={p.two_data}", "of=/dev/null", *dd, "iflag=direct"],
            ["dd", "if=/dev/zero", f"of={dst}", *dd, "oflag=direct"],
        ]

    def run():
        for cmd in cmds:
            subprocess.run(cmd, check=True, capture_output=True)

    return Case(run, [dst], nbytes=2 * size)


def _dedup(p: Paths, out: str, kind: str) -> Case:
    dsts = [os.path.join(out, os.path.basename(m)) for m in p.models(kind)]
    return Case(
        lambda: onnxl.deduplicate_external_data(p.models(kind), dsts, DEDUP_WEIGHTS),
        [*dsts, os.path.join(out, DEDUP_WEIGHTS)],
    )


def dedup(p: Paths, out: str) -> Case:
    """onnx-light: ``deduplicate_external_data`` of the pair into a new folder (one
    weights file, each distinct byte string once, aligned to 4096)."""
    return _dedup(p, out, "pair")


def dedup_many(p: Paths, out: str) -> Case:
    """onnx-light: the same of the twins pair, 200,000 tensors of 64 bytes in all."""
    return _on_many(_dedup(p, out, "twins"), p, "twins")


def dedup_quarter(p: Paths, out: str) -> Case:
    """onnx-light: the same of a quarter as many (50,000): time must scale linearly."""
    return _on_many(_dedup(p, out, "twinsq"), p, "twinsq")


FLOOR_BUFFER = 1 << 20


def floor_dedup(p: Paths, out: str) -> Case:
    """The floor of a deduplication of the pair into a new file: one loop reading both
    weights files once (into one 1 MiB buffer) and writing each unique byte once.

    The unique ranges are known from the pair's construction, read from ``b.onnx``
    before the measure: every byte of ``a``, and ``b``'s tensors that differ from
    ``a``'s (weights and biases 0, 8, 16...: 9/16 of the naive total in all). Nothing
    is compared: a dedup also compares the shared 7/8, in memory it has read anyway.
    """
    datas = p.datas("pair")
    dst = os.path.join(out, DEDUP_WEIGHTS)
    changed = []  # (offset, end) in b.onnx.data of the tensors b does not share with a
    for t in onnx.load(p.models("pair")[1], load_external_data=False).graph.initializer:
        index = int(t.name[1:]) if t.name[:1] in "WB" and t.name[1:].isdigit() else None
        if index is not None and index % NEW_EVERY == 0:
            entries = {e.key: int(e.value) for e in t.external_data if e.key != "location"}
            changed.append((entries["offset"], entries["offset"] + entries["length"]))
    changed.sort()

    def run():
        buf = bytearray(FLOOR_BUFFER)
        view = memoryview(buf)
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for src, keep in zip(datas, (None, changed), strict=True):
                with open(src, "rb", buffering=0) as f:
                    pos = 0
                    while n := f.readinto(buf):
                        if keep is None:
                            os.write(fd, view[:n])
                        else:
                            for start, end in keep:
                                lo, hi = max(start, pos), min(end, pos + n)
                                if lo < hi:
                                    os.write(fd, view[lo - pos : hi - pos])
                        pos += n
        finally:
            os.close(fd)

    return Case(run, [dst])


def cat_both(p: Paths, out: str) -> Case:
    """The floor of any deduplication: ``cat`` of both weights files to ``/dev/null``
    (the kernel's read of every byte once, 128 KiB at a time). Its "bytes" are the
    bytes it read: the naive total, both models' weights."""
    datas = p.datas("pair")

    def run():
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", *datas], stdout=null, check=True)

    return Case(run, nbytes=sum(os.path.getsize(d) for d in datas))


def cat_copy(p: Paths, out: str) -> Case:
    """The floor of a deduplication that writes its output: ``cat`` of both weights
    files to ``/dev/null``, then a kernel copy (``copy_file_range``) of as many bytes
    as it writes: all of ``a``'s and 1/8 of ``b``'s (9/16 of the naive total)."""
    datas = p.datas("pair")
    dst = os.path.join(out, DEDUP_WEIGHTS)
    sizes = [os.path.getsize(d) for d in datas]

    def run():
        with open(os.devnull, "wb") as null:
            subprocess.run(["cat", *datas], stdout=null, check=True)
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = 0
            for src, count in zip(datas, (sizes[0], sizes[1] // NEW_EVERY), strict=True):
                with open(src, "rb") as f:
                    left, off = count, 0
                    while left:
                        n = os.copy_file_range(f.fileno(), fd, left, off, done)
                        if n == 0:
                            raise OSError(f"{src}: ended early")
                        left, off, done = left - n, off + n, done + n
        finally:
            os.close(fd)

    return Case(run, [dst])


def ir_dedup(p: Paths, out: str) -> Case:
    """onnx-ir: for each model of the pair, ``ir.load``, ``DeduplicateInitializersPass``
    with its size limit raised so it looks at every tensor, ``ir.save`` with external
    data (alignment 4096, its own weights file). The pass works within one model: it
    cannot share the bytes the two models have in common."""
    dsts = [os.path.join(out, os.path.basename(m)) for m in p.models("pair")]

    def run():
        for src, dst in zip(p.models("pair"), dsts, strict=True):
            model = ir.load(src)
            DeduplicateInitializersPass(size_limit=sys.maxsize)(model)
            ir.save(
                model,
                dst,
                external_data=os.path.basename(dst) + ".data",
                size_threshold_bytes=1024,
                alignment=ALIGNMENT,
                align_threshold=0,
                **IR_DEDUP,
            )
            del model

    return Case(run, [f for d in dsts for f in (d, d + ".data")])


def convert(p: Paths, out: str) -> Case:
    """onnx-light: ``convert_float_to_float16``, the weights cast as they stream."""
    dst = os.path.join(out, MODEL)
    return Case(lambda: onnxl.convert_float_to_float16(p.two, dst), [dst, dst + ".data"])


def _convert_forced(p: Paths, out: str, kind: str) -> Case:
    dst = os.path.join(out, MODEL)

    def run():
        onnxl.convert_float_to_float16(getattr(p, kind), dst, force_fp16_initializers=True)

    return _on_many(Case(run, [dst, dst + ".data"]), p, kind)


def convert_many(p: Paths, out: str) -> Case:
    """onnx-light: the same of 200,000 tensors of 64 bytes (``force_fp16_initializers``:
    no node reads them, every one is converted)."""
    return _convert_forced(p, out, "many")


def convert_quarter(p: Paths, out: str) -> Case:
    """onnx-light: the same of the 50,000-tensor model."""
    return _convert_forced(p, out, "quarter")


def graph_many(p: Paths, out: str) -> Case:
    """What the converter adds to a re-align, alone: the 200,000-tensor model scanned
    without its weights and its graph converted (onnx's shape inference, then
    onnxruntime's rules), nothing written."""
    from onnx_light.onnx._graph.float16 import convert_graph
    from onnx_light.onnx._read.scan import scan_model
    from onnx_light.onnx._read.sources import SourceFiles

    def run():
        with SourceFiles() as files:
            model, _ = scan_model(p.many, files)
        convert_graph(model, force_fp16_initializers=True)

    return _on_many(Case(run, nbytes=0), p, "many")


def floor_cast(p: Paths, out: str) -> Case:
    """The floor of a float16 conversion: one loop reading the weights file in 16 MiB
    chunks, casting with numpy (``astype(float16)``) and writing a new file."""
    dst = os.path.join(out, DATA)
    step = 16 << 20

    def run():
        with open(p.two_data, "rb") as f, open(dst, "wb") as g:
            while chunk := f.read(step):
                g.write(np.frombuffer(chunk, np.float32).astype(np.float16).tobytes())

    return Case(run, [dst])


def ort_convert(p: Paths, out: str) -> Case:
    """The usual recipe: ``onnx.load`` with the weights, onnxruntime's
    ``convert_float_to_float16`` (shape inference on, as users run it), ``onnx.save``
    with external data."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    dst = os.path.join(out, MODEL)

    def run():
        model = convert_float_to_float16(onnx.load(p.two))
        onnx.save(model, dst, save_as_external_data=True, location=DATA)

    return Case(run, [dst, os.path.join(out, DATA)])


def quantize(p: Paths, out: str) -> Case:
    """onnx-light: ``quantize_weights`` with its defaults (onnxruntime's: 4 bits, blocks
    of 128, asymmetric), each weight read in slabs of whole blocks."""
    dst = os.path.join(out, MODEL)
    return Case(lambda: onnxl.quantize_weights(p.matmul, dst), [dst, dst + ".data"])


def floor_quantize(p: Paths, out: str) -> Case:
    """The floor of a quantization: one loop reading each weight whole (its offset from
    the ``.onnx``, parsed before the clock), onnxruntime's own per-tensor function
    (``quantize_matmul_4bits``, the one its quantizer calls) on it, the packed values,
    scales and zero points written once. Each weight is read into a new ``bytearray``:
    read into ``np.empty`` instead, the same call took more user time here (0.34 s
    against 0.20 s per 64 MiB weight, interleaved in one process)."""
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    model = onnx.load(p.matmul, load_external_data=False)
    weights = []
    for t in model.graph.initializer:
        info = {e.key: e.value for e in t.external_data}
        weights.append((tuple(t.dims), int(info["offset"]), int(info["length"])))
    dst = os.path.join(out, DATA)
    bs = 128

    def run():
        with open(p.matmul_data, "rb") as f, open(dst, "wb") as g:
            for (k, n), offset, length in weights:
                buf = bytearray(length)
                f.seek(offset)
                f.readinto(buf)
                values = np.frombuffer(buf, np.float32).reshape(k, n)
                blocks = -(-k // bs)
                packed = np.zeros((n, blocks, bs // 2), np.uint8)
                scales = np.zeros((n, blocks), np.float32)
                zeros = np.zeros((n, -(-blocks // 2)), np.uint8)
                quantize_matmul_4bits(packed, values, scales, zeros, bs, n, k, False)
                for part in (packed, scales, zeros):
                    g.write(memoryview(part).cast("B"))

    return Case(run, [dst])


def ort_quantize(p: Paths, out: str) -> Case:
    """onnxruntime's ``MatMulNBitsQuantizer`` with its defaults (the same settings):
    ``onnx.load`` with the weights, ``process()``, ``save_model_to_file`` with external
    data (without it, a model over 2 GiB fails to serialize)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    dst = os.path.join(out, MODEL)

    def run():
        q = MatMulNBitsQuantizer(onnx.load(p.matmul))
        q.process()
        q.model.save_model_to_file(dst, use_external_data_format=True)

    return Case(run, [dst, dst + ".data"])


OPS: dict[str, Callable[[Paths, str], Case]] = {
    f.__name__: f
    for f in (
        copyfile,
        align,
        ir_align,
        copyfile_aligned,
        align_aligned,
        ir_align_aligned,
        align_many,
        align_quarter,
        ir_align_many,
        floor_access_many,
        floor_access_twins,
        floor_meta_many,
        floor_meta_quarter,
        floor_meta_twins,
        floor_meta_twinsq,
        info_many,
        info_quarter,
        verify_many,
        verify_quarter,
        light_save,
        onnx_save,
        ir_save,
        floor_write,
        floor_copy,
        onnx_loadsave,
        light_loadsave,
        onnx_load,
        light_load2,
        shared_save,
        full_save,
        skip_load,
        onnx_load_single,
        ort_aligned,
        ort_single,
        forest_scan,
        onnx_load_forest,
        align_single,
        ir_align_single,
        dedup,
        dedup_many,
        dedup_quarter,
        floor_dedup,
        cat_both,
        cat_copy,
        ir_dedup,
        cp,
        align_drop,
        align_durable,
        floor_device,
        convert,
        convert_many,
        convert_quarter,
        graph_many,
        floor_cast,
        ort_convert,
        quantize,
        floor_quantize,
        ort_quantize,
    )
}
# the same operations measured cold (page cache dropped first) and in a memory cgroup
for _name, _op in (("cp", cp), ("ir", ir_align), ("onnx", onnx_loadsave), ("align", align)):
    OPS[f"cold_{_name}"] = OPS[f"cg_{_name}"] = _op
for _name in ("align_drop", "align_durable"):
    OPS[f"cold_{_name}"] = OPS[f"cg_{_name}"] = OPS[_name]
OPS["cg_convert"], OPS["cg_ort_convert"] = convert, ort_convert
OPS["cold_align_seq"] = _hinted("sequential")
OPS["cold_align_willneed"] = _hinted("willneed")
