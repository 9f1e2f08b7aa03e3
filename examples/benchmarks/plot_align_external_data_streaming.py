"""
.. _l-example-plot-align-external-data-streaming:

Streaming re-alignment against load + save: time, memory, bytes
===============================================================

A model stored as two files (``model.onnx`` + ``model.onnx.data``) must be
re-written so that every tensor starts at an offset that is a multiple of
4096, the page size: then a runtime can memory-map the weights instead of
copying them. There are two ways to do it:

* **in memory**: :func:`onnx_light.onnx.load` every weight, then
  :func:`onnx_light.onnx.save` with ``alignment=4096``. Peak memory grows
  with the size of the model;
* **streaming**: :func:`onnx_light.onnx.align_external_data_streaming` parses
  only the metadata of the ``.onnx`` and has the kernel copy each tensor's
  bytes file to file. Peak memory stays flat, whatever the size.

This example measures both on a synthetic model (24 float32 weights of
1024 x 1024, 96 MiB; 8 of 256 x 256 under ``UNITTEST_GOING=1``), checks that
they write the very same bytes, and plots time and memory.
"""

# %%
# Build a two-file model and forget it
# ------------------------------------
#
# ``benchmarks.harness.make_gemm_model`` builds a chain of ``Gemm`` nodes;
# :func:`onnx.save_model` stores it as a ``.onnx`` with a ``.data`` file, the
# layout most exporters produce. The weights are then dropped from memory:
# the two approaches start from files on disk, as they would in real life.

import gc
import os
import shutil
import tempfile
import textwrap
import tracemalloc
from pathlib import Path

import matplotlib.pyplot as plt
import onnx
import pandas

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    PeakMemory,
    describe_machine,
    empty_folder,
    legend_beside,
    make_gemm_model,
    measure_rounds,
    median_bars,
    quick_run,
    sized,
    summary_bars,
    tensor_places,
    tool_color,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((24, 1024), quick=(8, 256))
ALIGNMENT = 4096
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-align-")
src = os.path.join(folder, "model.onnx")

# Real models mix tensor sizes: a table of 1,000 int64 ids (8,000 bytes, not a
# multiple of 4096) placed first shifts every following weight off the page.
model = make_gemm_model(N_WEIGHTS, DIM, lead_table=8000)
onnx.save_model(model, src, save_as_external_data=True, location="model.onnx.data")
del model
gc.collect()

src_data = os.path.join(folder, "model.onnx.data")
print(f"weights: {weights_nbytes(N_WEIGHTS, DIM) / MiB:.1f} MiB")
print(
    f"model.onnx: {os.path.getsize(src)} bytes, model.onnx.data: {os.path.getsize(src_data)} bytes"
)

# %%
# Where do the tensors start? :func:`onnx.save_model` packs them one after
# the other, so once the 8,000-byte table is written no weight starts on a
# page boundary any more: ``offset % 4096`` is not 0.
# ``benchmarks.harness.tensor_places`` reads each tensor's file, offset and
# length from the ``.onnx`` alone.

p_src = tensor_places(src)
p_src.assign(offset_mod_4096=p_src.offset % ALIGNMENT).set_index("name").head(6)

# %%
# The two approaches
# ------------------
#
# Each function writes an aligned copy of the model under its own name in
# ``out/``, its weights in a file beside it (a path built with
# :func:`os.path.join`, as the model's). The in-memory one loads every
# weight (``load_external_data=True`` is the default) and saves with
# ``ModelProto.SerializeToFile(path, options, weights_path)``, which means
# ``onnxl.save(model, path, location=weights_path, options=options)``; the
# streaming one never loads a weight.


def in_memory(dst: str) -> None:
    loaded = onnxl.load(src, load_external_data=True)
    loaded.SerializeToFile(dst, onnxl.SerializeOptions(alignment=ALIGNMENT), dst + ".data")


def streaming(dst: str) -> None:
    onnxl.align_external_data_streaming(
        src_onnx_path=src, dst_onnx_path=dst, dst_weights_path=dst + ".data", alignment=ALIGNMENT
    )


def plain_copy(dst: str) -> None:
    """The kernel's plain copy of the same bytes (shutil.copyfile): the reference the
    streaming copy is compared with, not a bound (splicing through a larger pipe can beat it)."""
    shutil.copyfile(src_data, dst + ".data")


# %%
# Measure time and peak memory
# ----------------------------
#
# ``benchmarks.harness.measure_rounds`` is the measuring method of this
# gallery and of ``make bench``: each call runs in a process of its own
# (forked from this script, so it starts with nothing an earlier run
# allocated), in interleaved rounds (every approach once per round, in a new
# order each round), with the source in the page cache and earlier writes
# flushed. In that process ``benchmarks.harness.PeakMemory`` resets the
# kernel's peak counter (``VmHWM``, through ``/proc/self/clear_refs``) before
# the call and reads it after: the growth is the exact peak of the call,
# every allocation included. The table gives the median and the spread
# (min-max) over the rounds.


approaches = {"in memory (load + save)": in_memory, "streaming": streaming}
if not quick_run():
    approaches["shutil.copyfile (reference)"] = plain_copy
out = os.path.join(folder, "out")  # emptied before each run, as before a first save
cases = {
    name: lambda fn=fn: fn(os.path.join(out, f"{fn.__name__}.onnx"))
    for name, fn in approaches.items()
}
rounds = measure_rounds(
    cases,
    warm_files=[src, src_data],
    before=lambda _name: empty_folder(out),
)
table = pandas.DataFrame(rounds.summary()).set_index("operation")
table["weights MiB"] = weights_nbytes(N_WEIGHTS, DIM) / MiB
table.round(3)

# %%
# The curves of memory over time come from one more run of each, with
# ``benchmarks.harness.RssTimeline`` sampling the resident set size
# every 2 ms on a thread: a sampler running during the timed rounds would
# slow them down.

curves = measure_rounds(
    cases,
    rounds=1,
    warm_files=[src, src_data],
    before=lambda _name: empty_folder(out),
    timeline=True,
)
for case in cases.values():  # the outputs the checks below read
    case()

# %%
# Why not tracemalloc?
# --------------------
#
# :mod:`tracemalloc` only sees memory allocated through Python's allocator.
# The weights of a loaded model live in protobuf's C++/upb arenas, which it
# does not see; neither does it see numpy buffers allocated in C or pages of
# memory-mapped files. Run the in-memory path under both and compare.

dst = os.path.join(folder, "traced.onnx")
tracemalloc.start()
with PeakMemory() as peak:
    in_memory(dst)
traced_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(f"in memory, tracemalloc's peak : {traced_peak / MiB:8.1f} MiB")
print(f"in memory, the kernel's peak  : {peak.growth / MiB:8.1f} MiB")

# %%
# Same bytes either way
# ---------------------
#
# Both paths call the same layout planner, so they must produce the same
# layout: every offset a multiple of 4096, the same lengths, the same bytes,
# and these bytes equal to the source's.

p_stream = tensor_places(os.path.join(out, "streaming.onnx"))
p_memory = tensor_places(os.path.join(out, "in_memory.onnx"))
assert (p_stream.offset % ALIGNMENT == 0).all(), "streaming: unaligned offset"
assert (p_memory.offset % ALIGNMENT == 0).all(), "in memory: unaligned offset"
assert p_stream.length.tolist() == p_memory.length.tolist() == p_src.length.tolist()
assert p_stream.offset.tolist() == p_memory.offset.tolist()
stream_bytes = Path(out, "streaming.onnx.data").read_bytes()
assert Path(out, "in_memory.onnx.data").read_bytes() == stream_bytes, "the weights files differ"
source_bytes = Path(src_data).read_bytes()
for s, o in zip(p_stream.itertuples(), p_src.itertuples(), strict=True):
    copied = stream_bytes[s.offset : s.offset + s.length]
    assert copied == source_bytes[o.offset : o.offset + o.length], f"tensor {s.name}: bytes differ"
print(f"{len(p_stream)} tensors: offsets aligned to {ALIGNMENT}, lengths and bytes equal")
p_stream.set_index("name").head(6)

# %%
# Time and peak memory
# --------------------
#
# What was measured, and the claim that does not depend on the machine,
# asserted: the streaming copy's peak memory does not grow with the weights.
# The words on the two times are the gallery report's, measured once with
# more rounds (``benchmarks.harness.Comparison.sentence``: a ranking only
# where every round of one was below every round of the other, else within
# this machine's noise); each sentence then says where this build's own
# ratio falls against the report's range.

weights = weights_nbytes(N_WEIGHTS, DIM) / MiB
stream_peak = max(rounds.peaks("streaming"))
memory_peak = min(rounds.peaks("in memory (load + save)"))
print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
print(
    f"peak memory: streaming at most +{stream_peak:.1f} MiB, in memory at least "
    f"+{memory_peak:.0f} MiB, for {weights:.0f} MiB of weights"
)
print(rounds.compare("streaming", "in memory (load + save)").sentence())
if "shutil.copyfile (reference)" in approaches:
    print(rounds.compare("streaming", "shutil.copyfile (reference)").sentence())
assert stream_peak < 16, "streaming must not hold the weights in memory"
assert memory_peak >= 0.9 * weights, "load + save holds every weight"

# %%
# The result in one picture: the peak memory of each way (the weights' size
# dashed), the median of the rounds with their min-max.

colors = {  # the in-memory recipe is onnx's way (load + save), in onnx's colour
    "in memory (load + save)": tool_color("onnx"),
    "streaming": tool_color("onnx-light"),
    "shutil.copyfile (reference)": tool_color("floor"),
}
names, palette = rounds.names, [colors[n] for n in rounds.names]
summary_bars(
    names,
    {name: rounds.peaks(name) for name in names},
    "MiB",
    "peak memory while re-aligning",
    reference=weights,
    reference_label="the weights",
    colors=palette,
)
plt.show()

# %%
# Time and memory side by side, each bar the median of the rounds and its
# line their min-max:

fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
median_bars(axes[0], {n: rounds.seconds(n) for n in names}, "s", "wall time", palette)
median_bars(axes[1], {n: rounds.peaks(n) for n in names}, "MiB", "peak RSS growth", palette)
axes[1].axhline(weights, color="black", ls="--", lw=1, label="model weights")
legend_beside(axes[1])
fig.suptitle(f"Re-align {weights:.0f} MiB to {ALIGNMENT}, {len(rounds.seconds(names[0]))} rounds")
fig.tight_layout()

# %%
# Memory over time
# ----------------
#
# The resident memory sampled every 2 ms during one run of each approach,
# relative to its value at the start, in its two kinds (``/proc/self/status``):
# **anonymous** memory (``RssAnon``, solid: the process's own, where loaded
# weights go) and **file-backed** memory (``RssFile``, dotted: pages of mapped
# files, the page cache's, shared and reclaimable). A maximum RSS adds them;
# here they stay apart. The in-memory path's anonymous memory climbs to the
# size of the model (the weights read into the model) and more; the streaming
# path stays flat in both, because the bytes never enter the process: the
# kernel copies them file to file, and neither path maps the weights.

# sphinx_gallery_thumbnail_number = 3
# (narrow, large text, the legend under the axes: the site's front page shows this
# figure, and on a phone it is 390 px wide)
fig, ax = plt.subplots(figsize=(6.4, 4.9))
short = {"in memory (load + save)": "load + save", "streaming": "streaming"}
for name in short:
    samples = curves.samples(name)
    t0, first = samples[0].t, samples[0]
    ms = [1000 * (s.t - t0) for s in samples]
    for kind, style in (("anon", "-"), ("file", ":")):
        ax.plot(
            ms,
            [(getattr(s, kind) - getattr(first, kind)) / MiB for s in samples],
            color=colors[name],
            ls=style,
            lw=2,
            label=f"{short[name]}, {'anonymous' if kind == 'anon' else 'file-backed'}",
        )
ax.axhline(weights, color="black", ls="--", lw=1, label="model weights")
ax.set_xlabel("time since the call started (ms)", fontsize=13)
ax.set_ylabel("memory growth (MiB)", fontsize=13)
ax.tick_params(labelsize=12)
ax.set_title("Anonymous and file-backed memory while re-aligning", fontsize=13)
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=2, fontsize=11, frameon=False)
fig.tight_layout()

# %%
# Shards: several weights files of a bounded size
# -----------------------------------------------
#
# Hosting limits, or runtimes that cannot map a file over 2 GiB, ask for the
# weights split in files of a bounded size. ``max_shard_size`` does it in the
# same streaming copy: each tensor lies whole in one shard, aligned within it,
# named as onnx-ir names its shards, and all files are committed together.

limit = max(weights * MiB / 3, 1)  # about three shards
onnxl.align_external_data_streaming(
    src,
    os.path.join(folder, "sharded.onnx"),
    os.path.join(folder, "sharded.onnx.data"),
    alignment=ALIGNMENT,
    options=onnxl.WriteOptions(max_shard_size=int(limit)),
)
sharded = tensor_places(os.path.join(folder, "sharded.onnx"))
shards = sharded.groupby("location").agg(tensors=("name", "count"), bytes=("length", "sum"))
for name in shards.index:  # each shard within the limit, unless one tensor alone is larger
    size = os.path.getsize(os.path.join(folder, name))
    assert size <= limit or shards.loc[name, "tensors"] == 1, name
assert len(shards) > 1 and (sharded.offset % ALIGNMENT == 0).all()
assert sharded.length.tolist() == p_src.length.tolist()
shards.rename(columns={"bytes": "tensor bytes"})

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# The streaming helper is the right tool whenever the weights do not need
# to be changed: see :ref:`l-howto-align-external-data-streaming` for the
# recipe and the command line.

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-load-save-time`
# * :ref:`l-example-plot-onnxruntime-loading-memory`
# * :ref:`l-example-plot-save-model-with-shared-external-data`
