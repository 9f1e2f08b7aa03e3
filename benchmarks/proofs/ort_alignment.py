"""What alignment buys with onnxruntime: session memory and time of real exports, per layout.

What it measures
----------------
Three transformer exports made here from configurations with random weights
(no model can be downloaded on the machines this project runs on; the
weights' values change nothing in what is measured):

* ``gpt2``: a GPT-2 (the ``gpt2`` size, 124M parameters) saved with
  ``save_pretrained`` and exported by optimum's ``main_export`` (task
  ``text-generation``), with ``FORCE_ONNX_EXTERNAL_DATA=1`` so that its
  weights are external, as optimum writes them for models over 2 GiB
  (``onnx.save``: tensors packed one after the other, no alignment);
* ``llama``: a Llama (8 layers, hidden size 1024) exported by
  ``torch.onnx.export(..., dynamo=True)`` and saved with
  ``external_data=True`` (onnx-ir's writer: packed, no alignment; every
  tensor's size being a multiple of 4 KiB, all land on 4096-byte boundaries);
* ``bert``: a BERT (20 layers, hidden size 1536, about 2.3 GiB of weights)
  exported the same way: over 2 GiB, it can only be saved with external data.

Each export is written in these layouts, each in its own folder:

* ``exported``: as the exporter wrote it;
* ``shifted``: the same two files with every weight 8 bytes later (8 zero
  bytes first in the weights file, every offset + 8): no weight starts on a
  page, as when a writer puts a small table before the weights (the dynamo
  exports, whose tensors are all multiples of 4 KiB, are aligned by chance);
* ``exported+align``: re-aligned to 4096 by
  :func:`onnx_light.onnx.align_external_data_streaming`;
* ``single``: one ``.onnx`` holding every weight (``onnx.save`` without
  external data; only for the models under 2 GiB);
* ``single+align``: that single file given aligned external data by
  :func:`onnx_light.onnx.align_external_data_streaming` (moved out and
  aligned to 4096 in one step).

For each layout, with onnxruntime's default session options and with
prepacking disabled (``session.disable_prepacking=1``), one fresh process per
measurement (``--worker``) creates an ``onnxruntime.InferenceSession`` on the
CPU and reports: the creation time; the growth of the kernel's peak RSS
during it (``VmHWM`` reset through ``/proc/self/clear_refs``,
:class:`benchmarks.harness.PeakMemory`); the growth of ``RssAnon`` (private
memory: copies of the weights, prepacked buffers) and ``RssFile`` (pages of
mapped files) read from ``/proc/self/status`` after it
(:func:`benchmarks.harness.read_status`); how many bytes of the weights file
are memory-mapped (``/proc/self/maps``); then runs one inference and saves
its outputs, which must be equal across layouts. Every file of a layout is
read once before its measurement, so the page cache holds it. Rounds are
interleaved: each round measures every case once, in a new seeded order.

The report also says, for each layout, how many external tensors start on a
4096-byte boundary and how many a *direct* reader could map in place, one
``mmap(offset=...)`` per tensor, as numpy or a safetensors-like reader
would: the mapping offset must be a multiple of ``mmap.ALLOCATIONGRANULARITY``.

How to run it
-------------
By hand, in a venv of its own (torch, transformers and optimum are not
dependencies of onnx-light, and ``make`` does not run this script)::

    python3 -m venv /tmp/ortv
    /tmp/ortv/bin/pip install torch==2.13.0   # the CPU build: see below
    /tmp/ortv/bin/pip install onnxruntime==1.32.0 onnx==1.23.2 onnx-ir==1.1.0 \\
        transformers optimum optimum-onnx onnxscript
    /tmp/ortv/bin/pip install -e .
    /tmp/ortv/bin/python benchmarks/proofs/ort_alignment.py --workdir /var/tmp/ortalign --rounds 5

On this project's machines pip takes torch 2.13.0 from a CPU wheel kept on
disk; elsewhere, ask PyTorch's CPU wheel index for it (the plain wheel is a
CUDA build of several GB). It needs about 12 GiB of disk in ``--workdir``
(kept: a second run reuses the exports and layouts) and 8 GiB of RAM, and
takes about 10 minutes on 2 cores (1 to export, 1 to write the layouts, the
rest measuring 5 rounds of 26 cases). Results go to
``benchmarks/proofs/results/ort_alignment.md`` and ``.csv`` (``--output`` changes
the name). ``--models gpt2,llama`` keeps a subset.
"""

from __future__ import annotations

import argparse
import datetime
import json
import mmap
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout: benchmarks.*

from benchmarks.text import measured_commit, report_path, write_report  # noqa: E402

MiB = 2**20
GiB = 2**30
ALIGNMENT = 4096
SHIFT = 8  # bytes the "shifted" layout moves every weight by: none starts on a page
SEQ = 16  # tokens in the inference that checks the outputs
ALL_MODELS = ("gpt2", "llama", "bert")
PREPACKING = ("default", "disabled")
ONE_FILE_LIMIT = 2 * GiB - 64 * MiB  # protobuf's limit, with room for the graph


# ---------------------------------------------------------------- exports


def _export_gpt2(folder: Path) -> Path:
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    hf_dir = folder / "hf"
    model = GPT2LMHeadModel(GPT2Config()).eval()  # the "gpt2" size: 124M parameters
    model.save_pretrained(hf_dir)
    del model
    out = folder / "exported"
    # optimum writes external data for models over 2 GiB only: forced here.
    os.environ["FORCE_ONNX_EXTERNAL_DATA"] = "1"
    try:
        main_export(str(hf_dir), output=str(out), task="text-generation", no_post_process=True)
    finally:
        del os.environ["FORCE_ONNX_EXTERNAL_DATA"]
    shutil.rmtree(hf_dir)
    for name in os.listdir(out):  # config and generation files are not measured
        if not name.startswith("model.onnx"):
            os.remove(out / name)
    return out / "model.onnx"


def _logits_forward(self, input_ids, attention_mask):
    """The forward of the exported Llama: logits only, no cache."""
    return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _logits_module(model):
    """Wraps a causal LM so that the export has one output (no cache)."""
    import torch

    module = type("Logits", (torch.nn.Module,), {"forward": _logits_forward})()
    module.model = model  # a submodule: its parameters are the export's weights
    return module


def _torch_export(module, args, path: Path) -> Path:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        program = torch.onnx.export(module, args, dynamo=True, optimize=True)
    program.save(str(path), external_data=True)
    return path


def _export_llama(folder: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=2048,
        use_cache=False,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 1000, (1, SEQ), dtype=torch.int64)
    mask = torch.ones((1, SEQ), dtype=torch.int64)
    return _torch_export(_logits_module(model), (ids, mask), folder / "exported" / "model.onnx")


def _export_bert(folder: Path) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=1536,
        num_hidden_layers=20,
        num_attention_heads=24,
        intermediate_size=6144,
        attn_implementation="eager",
    )
    model = BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, 1000, (1, SEQ), dtype=torch.int64)
    mask = torch.ones((1, SEQ), dtype=torch.int64)
    return _torch_export(model, (ids, mask), folder / "exported" / "model.onnx")


EXPORTERS = {
    "gpt2": ("optimum main_export (torch.onnx, TorchScript), external data forced", _export_gpt2),
    "llama": ("torch.onnx.export(dynamo=True), external_data=True", _export_llama),
    "bert": ("torch.onnx.export(dynamo=True), external data (over 2 GiB)", _export_bert),
}


# ---------------------------------------------------------------- layouts


def _weights_files(onnx_path: Path) -> list[Path]:
    """The external data files a model refers to."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    proto = onnx.load(str(onnx_path), load_external_data=False)
    names = set()
    for t in _get_all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    names.add(e.value)
    return sorted(onnx_path.parent / n for n in names)


def _layout_files(onnx_path: Path) -> list[Path]:
    return [onnx_path, *_weights_files(onnx_path)]


def _weights_bytes(onnx_path: Path) -> int:
    """Bytes of every initializer, inline or external."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    proto = onnx.load(str(onnx_path), load_external_data=False)
    total = 0
    for t in _get_all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += int({e.key: e.value for e in t.external_data}.get("length", 0))
        else:
            total += len(t.raw_data)
    return total


def _offsets(onnx_path: Path) -> list[tuple[str, int, int, int]]:
    """(location, offset, length, element size) of each external tensor."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors
    from onnx.helper import tensor_dtype_to_np_dtype

    proto = onnx.load(str(onnx_path), load_external_data=False)
    out = []
    for t in _get_all_tensors(proto):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        try:
            itemsize = tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, TypeError):
            itemsize = 1
        out.append(
            (info["location"], int(info.get("offset", 0)), int(info.get("length", 0)), itemsize)
        )
    return out


def direct_map_check(onnx_path: Path) -> dict[str, int]:
    """What a direct reader gets from each external tensor, mapped by itself.

    ``mmap.mmap(fd, length, offset=offset)`` (Python's, as numpy.memmap calls it)
    needs an offset multiple of ``mmap.ALLOCATIONGRANULARITY``; it is tried for
    real on each tensor. A numpy view of the mapped bytes is aligned for its
    dtype when the offset is a multiple of the element size.
    """
    import numpy as np

    tensors = _offsets(onnx_path)
    res = {"tensors": len(tensors), "page_aligned": 0, "mapped": 0, "dtype_aligned": 0}
    for location, offset, length, itemsize in tensors:
        res["page_aligned"] += offset % ALIGNMENT == 0
        res["dtype_aligned"] += offset % itemsize == 0
        if length == 0:
            continue
        with open(onnx_path.parent / location, "rb") as f:
            try:
                m = mmap.mmap(f.fileno(), length, offset=offset, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                continue
            view = np.frombuffer(m, dtype=np.uint8, count=min(length, 16))
            res["mapped"] += 1
            del view
            m.close()
    return res


def shift_external_data(src: Path, dst: Path, shift: int) -> None:
    """A copy of a two-file model whose weights all sit ``shift`` bytes later.

    The weights file gets ``shift`` zero bytes first, then the original one,
    and every offset grows by ``shift``: with a ``shift`` of 8 no tensor starts
    on a page, each stays aligned for its element type (as a writer that puts a
    small table before the weights leaves them).
    """
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    proto = onnx.load(str(src), load_external_data=False)
    files = _weights_files(src)
    if len(files) != 1:
        raise ValueError(f"{src}: expected one weights file, found {len(files)}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    for t in _get_all_tensors(proto):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        entries = {e.key: e for e in t.external_data}
        if "offset" in entries:
            entries["offset"].value = str(int(entries["offset"].value) + shift)
        else:
            t.external_data.add(key="offset", value=str(shift))
    with open(files[0], "rb") as fin, open(dst.parent / files[0].name, "wb") as fout:
        fout.write(b"\0" * shift)
        shutil.copyfileobj(fin, fout, 64 * MiB)
    onnx.save(proto, str(dst))


def make_layouts(model: str, exported: Path) -> dict[str, Path]:
    """Writes (or reuses) every layout of one export; returns {layout: .onnx path}."""
    import onnx

    import onnx_light.onnx as onnxl

    root = exported.parent.parent
    layouts = {"exported": exported}
    shifted = root / "shifted" / "model.onnx"
    if not shifted.exists():
        shift_external_data(exported, shifted, SHIFT)
    layouts["shifted"] = shifted
    aligned = root / "exported+align" / "model.onnx"
    if not aligned.exists():
        aligned.parent.mkdir(parents=True, exist_ok=True)
        onnxl.align_external_data_streaming(
            exported, aligned, "model.onnx.data", alignment=ALIGNMENT
        )
    layouts["exported+align"] = aligned
    if _weights_bytes(exported) < ONE_FILE_LIMIT:
        single = root / "single" / "model.onnx"
        if not single.exists():
            single.parent.mkdir(parents=True, exist_ok=True)
            proto = onnx.load(str(exported))
            onnx.save(proto, str(single))
            del proto
        layouts["single"] = single
        single_aligned = root / "single+align" / "model.onnx"
        if not single_aligned.exists():
            single_aligned.parent.mkdir(parents=True, exist_ok=True)
            onnxl.align_external_data_streaming(
                single, single_aligned, "model.onnx.data", alignment=ALIGNMENT
            )
        layouts["single+align"] = single_aligned
    return layouts


def make_feeds(onnx_path: Path, npz: Path) -> None:
    """Inputs for one inference, from the model's graph inputs (batch 1, SEQ tokens)."""
    import numpy as np
    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    proto = onnx.load(str(onnx_path), load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in proto.graph.input:
        tt = inp.type.tensor_type
        shape = [
            d.dim_value if d.HasField("dim_value") else (1 if i == 0 else SEQ)
            for i, d in enumerate(tt.shape.dim)
        ]
        dtype = tensor_dtype_to_np_dtype(tt.elem_type)
        if "mask" in inp.name:
            value = np.ones(shape, dtype=dtype)
        elif "position" in inp.name:
            value = np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy()
        elif "token_type" in inp.name:
            value = np.zeros(shape, dtype=dtype)
        else:
            value = rng.integers(0, 1000, size=shape).astype(dtype)
        feeds[inp.name] = value
    np.savez(npz, **feeds)


# ---------------------------------------------------------------- one measurement


def _mapped_bytes(files: list[str]) -> int:
    """Bytes of this process's mappings of ``files`` (from /proc/self/maps)."""
    wanted = {os.path.realpath(f) for f in files}
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() in wanted:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                total += end - start
    return total


def worker(onnx_path: str, prepacking: str, feeds_npz: str, outputs_npz: str) -> dict:
    """One session creation in this (fresh) process, then one inference."""
    import numpy as np
    import onnxruntime as ort

    from benchmarks.harness import PeakMemory, read_status

    feeds = dict(np.load(feeds_npz))
    weights = [str(p) for p in _weights_files(Path(onnx_path))]
    so = ort.SessionOptions()
    if prepacking == "disabled":
        so.add_session_config_entry("session.disable_prepacking", "1")
    before = read_status()
    with PeakMemory() as peak:
        sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    after = read_status()
    mapped = _mapped_bytes(weights)
    outputs = sess.run(None, feeds)
    after_run = read_status()
    np.savez(outputs_npz, *outputs)
    return {
        "seconds": peak.seconds,
        "peak_growth": peak.growth,
        "peak_exact": peak.exact,
        "anon_growth": after["RssAnon"] - before["RssAnon"],
        "file_growth": after["RssFile"] - before["RssFile"],
        "mapped": mapped,
        "anon_growth_run": after_run["RssAnon"] - before["RssAnon"],
        "file_growth_run": after_run["RssFile"] - before["RssFile"],
    }


def _warm(files: list[Path]) -> None:
    """Read every file once so that the page cache holds it."""
    for p in files:
        with open(p, "rb") as f:
            while f.read(64 * MiB):
                pass


def _measure(onnx_path: Path, prepacking: str, feeds: Path, outputs: Path) -> dict:
    _warm(_layout_files(onnx_path))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        str(onnx_path),
        prepacking,
        str(feeds),
        str(outputs),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- report


def _versions() -> str:
    out = []
    for mod in ("onnxruntime", "onnx", "onnx_ir", "torch", "transformers", "optimum"):
        try:
            if mod == "optimum":
                from importlib.metadata import version

                v = f"optimum {version('optimum')}, optimum-onnx {version('optimum-onnx')}"
                out.append(v)
                continue
            out.append(f"{mod.replace('_', '-')} {__import__(mod).__version__}")
        except Exception:  # a missing package is reported, not fatal
            out.append(f"{mod} missing")
    return ", ".join(out)


def _mib(values: list[float]) -> str:
    vals = [v / MiB for v in values]
    return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})"


def _sec(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _fmt_size(n: int) -> str:
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    return f"{n / MiB:.0f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"


def report(
    rows: list[dict],
    info: dict,
    checks: dict,
    outputs_equal: dict,
    rounds: int,
    seconds: float,
    loads: tuple[float, float],
) -> str:
    """The Markdown report (every round's row goes to the CSV beside it)."""
    from benchmarks.harness import compare, describe_machine

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["layout"], r["prepacking"]), []).append(r)

    def col(key: tuple, field: str) -> list[float]:
        return [float(r[field]) for r in groups[key]]

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# onnxruntime sessions per weights layout",
        "",
        f"machine: {describe_machine()}",
        "",
        f"versions: {_versions()}; onnx-light commit {measured_commit()}; kernel "
        f"{platform.release()}; {now}",
        "",
        f"command: `benchmarks/proofs/ort_alignment.py --rounds {rounds}` ({seconds / 60:.0f} min, "
        "exports included when they were made)",
        "",
        "| model | weights | layout | prepacking | session peak RSS growth, MiB | "
        "RssAnon growth, MiB | RssFile growth, MiB | weights file mapped, MiB | "
        "session creation, s | outputs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in groups:
        model, layout, prepacking = key
        mapped = statistics.median(col(key, "mapped")) / MiB
        lines.append(
            f"| {model} | {_fmt_size(info[model]['weights'])} | {layout} | {prepacking} | "
            f"{_mib(col(key, 'peak_growth'))} | {_mib(col(key, 'anon_growth'))} | "
            f"{_mib(col(key, 'file_growth'))} | {mapped:.0f} | {_sec(col(key, 'seconds'))} | "
            f"{outputs_equal[key]} |"
        )
    lines += [
        "",
        f"{rounds} rounds, interleaved (every case once per round, a new seeded order each "
        "round), one fresh process per measurement; each layout's files read once before "
        "its measurement (page cache warm). Values: median (min-max) over the rounds. "
        "Session peak RSS growth: the kernel's `VmHWM` (reset through "
        "`/proc/self/clear_refs`) minus the RSS before `InferenceSession(...)`. "
        "RssAnon / RssFile growth: `/proc/self/status` after the session is created minus "
        "before. Weights file mapped: the size of the process's mappings of the `.data` "
        "file(s) (`/proc/self/maps`) after creation. Prepacking `disabled`: session config "
        "entry `session.disable_prepacking=1`. Outputs: one inference (batch 1, "
        f"{SEQ} tokens) compared with the `exported` layout's, same prepacking setting "
        "(`equal`: bit for bit). Load average (1 min) before / after the measurements: "
        f"{loads[0]:.2f} / {loads[1]:.2f} (of {os.cpu_count()} CPUs).",
        "",
        "## After one inference",
        "",
        "The same processes, after the inference that checked the outputs: growth since "
        "before the session was created (median over the rounds). The weights of a mapped "
        "file are read at their first use, into file-backed pages.",
        "",
        "| model | layout | prepacking | RssAnon growth, MiB | RssFile growth, MiB |",
        "|---|---|---|---|---|",
        *(
            f"| {m} | {lay} | {pp} | "
            f"{statistics.median(col((m, lay, pp), 'anon_growth_run')) / MiB:.1f} | "
            f"{statistics.median(col((m, lay, pp), 'file_growth_run')) / MiB:.1f} |"
            for (m, lay, pp) in groups
        ),
        "",
        "## Exports and layouts",
        "",
        "| model | exported by | weights | layout | files | external tensors | "
        "at a 4096 multiple | mappable alone by mmap(offset) | dtype-aligned |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (model, layout), c in checks.items():
        files = ", ".join(f"{n} ({_fmt_size(s)})" for n, s in c["files"])
        lines.append(
            f"| {model} | {info[model]['exporter']} | {_fmt_size(info[model]['weights'])} | "
            f"{layout} | {files} | {c['tensors']} | {c['page_aligned']} | {c['mapped']} | "
            f"{c['dtype_aligned']} |"
        )
    lines += [
        "",
        "Mappable alone: `mmap.mmap(fd, length, offset=offset)` tried on each external "
        f"tensor (the offset must be a multiple of `mmap.ALLOCATIONGRANULARITY`, "
        f"{mmap.ALLOCATIONGRANULARITY} here), as a reader that maps each tensor by itself "
        "does. dtype-aligned: offset a multiple of the element size.",
        "",
        "## Comparisons",
        "",
        "A ranking is stated only when every round of one is below every round of the "
        "other (`benchmarks.harness.compare`).",
        "",
    ]
    pairs = [
        ("exported", "exported+align"),
        ("shifted", "exported+align"),
        ("single", "single+align"),
    ]
    figures = (
        ("peak_growth", "session peak RSS growth", "MiB", MiB),
        ("seconds", "session creation", "s", 1),
    )
    for field, what, unit, scale in figures:
        lines.append(f"{what[0].upper()}{what[1:]}:")
        lines.append("")
        for model in info:
            for prepacking in PREPACKING:
                for a, b in pairs:
                    ka, kb = (model, a, prepacking), (model, b, prepacking)
                    if ka not in groups or kb not in groups:
                        continue
                    c = compare(
                        f"{model} {a} (prepacking {prepacking})",
                        [v / scale for v in col(ka, field)],
                        f"{model} {b}",
                        [v / scale for v in col(kb, field)],
                        unit=unit,
                    )
                    lines.append(f"* {c.own_sentence()}")  # this report is the measurement
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        print(json.dumps(worker(*argv[1:5])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="/var/tmp/ortalign")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--output", default="ort_alignment")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    work = Path(args.workdir)
    models = [m for m in args.models.split(",") if m]

    info: dict[str, dict] = {}
    cases = []
    checks: dict[tuple, dict] = {}
    for model in models:
        exporter, export = EXPORTERS[model]
        folder = work / model
        exported = folder / "exported" / "model.onnx"
        if not exported.exists():
            t = time.perf_counter()
            print(f"exporting {model}...", flush=True)
            export(folder)
            print(f"  {time.perf_counter() - t:.0f} s", flush=True)
        info[model] = {"exporter": exporter, "weights": _weights_bytes(exported)}
        layouts = make_layouts(model, exported)
        feeds = folder / "feeds.npz"
        if not feeds.exists():
            make_feeds(exported, feeds)
        for layout, path in layouts.items():
            c = direct_map_check(path)
            c["files"] = [(p.name, p.stat().st_size) for p in _layout_files(path)]
            checks[(model, layout)] = c
            for prepacking in PREPACKING:
                cases.append((model, layout, prepacking, path, feeds))

    rng = random.Random(args.seed)
    rows = []
    out_dir = work / "outputs"
    out_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    # Not measured: brings onnxruntime's library and Python's modules into the page cache.
    _measure(cases[0][3], cases[0][2], cases[0][4], out_dir / "warmup.npz")
    for r in range(args.rounds):
        order = list(cases)
        if r:
            rng.shuffle(order)
        for model, layout, prepacking, path, feeds in order:
            out = out_dir / f"{model}-{layout}-{prepacking}-{r}.npz"
            res = _measure(path, prepacking, feeds, out)
            print(
                f"round {r} {model:5s} {layout:14s} {prepacking:8s} "
                f"peak {res['peak_growth'] / MiB:8.1f} MiB anon {res['anon_growth'] / MiB:8.1f} "
                f"file {res['file_growth'] / MiB:8.1f} mapped {res['mapped'] / MiB:8.1f} "
                f"{res['seconds']:.3f} s",
                flush=True,
            )
            if not res["peak_exact"]:
                print("  (VmHWM could not be reset: the peak is sampled)", flush=True)
            rows.append(
                {
                    "model": model,
                    "weights_bytes": info[model]["weights"],
                    "layout": layout,
                    "prepacking": prepacking,
                    "round": r,
                    **res,
                }
            )

    import numpy as np

    outputs_equal = {}
    for model, layout, prepacking, _, _ in cases:
        ref = np.load(out_dir / f"{model}-exported-{prepacking}-0.npz")
        verdicts = []
        for r in range(args.rounds):
            got = np.load(out_dir / f"{model}-{layout}-{prepacking}-{r}.npz")
            same = all(np.array_equal(ref[k], got[k]) for k in ref.files)
            if same:
                verdicts.append("equal")
            else:
                diff = max(float(np.max(np.abs(ref[k] - got[k]))) for k in ref.files)
                verdicts.append(f"max abs diff {diff:.2g}")
        outputs_equal[(model, layout, prepacking)] = (
            "equal" if set(verdicts) == {"equal"} else "; ".join(sorted(set(verdicts)))
        )

    text = report(
        rows,
        info,
        checks,
        outputs_equal,
        args.rounds,
        time.perf_counter() - t0,
        (load_before, os.getloadavg()[0]),
    )
    path = report_path(f"{args.output}.md")
    write_report(path, text, rows)
    print(f"wrote {path} and its .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
