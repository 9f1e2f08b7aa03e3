"""
.. _l-example-plot-load-save-time:

Load and save time: onnx, onnx-light and onnx-ir
================================================

Three libraries read and write ONNX models with external data:

* :mod:`onnx`: :func:`onnx.load` reads every weight into ``raw_data``;
  :func:`onnx.save` with ``save_as_external_data=True`` writes them to a
  ``.data`` file (and turns the tensors of the model it is given into
  references);
* ``onnx-light``: :func:`onnx_light.onnx.load` reads the same tensors with
  parallel positional reads; :func:`onnx_light.onnx.save` writes them at
  aligned offsets and leaves the model unchanged;
* ``onnx-ir``: :func:`onnx_ir.load` is *lazy*, it parses the metadata and
  memory-maps the weights file, whose bytes are read when something touches
  them; :func:`onnx_ir.save` with ``external_data=`` writes them.

Because onnx-ir defers the reading, comparing ``load`` alone would compare
different work. We time three things on two-file models of growing size:

1. **load**: each library's load, plus the metadata-only loads (onnx-ir's
   lazy load, onnx-light's ``load_external_data=False``) and onnx-ir's load
   followed by reading every tensor;
2. **save** of a model held in memory, to two files;
3. **re-align**: read a two-file model and write it back with its tensors
   aligned to 4096 bytes, the task where laziness pays; onnx-light also has
   :func:`~onnx_light.onnx.align_external_data_streaming`, which never loads
   the weights.

Every file is in the page cache. Each call runs in a process of its own,
in interleaved rounds (``benchmarks.harness.measure_rounds``, the method of
``make bench``); the tables give the median and the spread over the rounds.
"""

# %%
# Sizes and imports
# -----------------

import os
import tempfile
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnx_ir as ir
import pandas
from matplotlib.ticker import NullFormatter

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    compare,
    describe_machine,
    empty_folder,
    legend_beside,
    make_gemm_model,
    measure_rounds,
    sized,
    summary_bars,
    tool_color,
    weights_nbytes,
)

DIM = sized(1024, quick=128)
COUNTS = sized([2, 8, 32], quick=[2, 8])  # weights of DIM x DIM float32 per model
MiB = 2**20


def read_all_ir(path: str) -> None:
    """onnx-ir's lazy load, then every weight read into memory."""
    model = ir.load(path)
    for value in model.graph.initializers.values():
        value.const_value.tobytes()


# %%
# The operations
# --------------
#
# Each is a call without arguments, for one source model (``src``, its
# model in memory ``proto``) and one destination folder (``out``). Each runs
# in a process of its own, so ``onnx.save``, which turns the tensors of the
# model it is given into references, changes that process's copy only.


def operations(src: str, out: str, proto: onnx.ModelProto) -> dict:
    dst, data = f"{out}/m.onnx", "m.onnx.data"
    aligned = onnxl.SerializeOptions(alignment=4096)
    ir_model = ir.serde.deserialize_model(proto)  # wraps the protos, copies nothing
    return {
        # 1. load
        ("load", "onnx"): lambda: onnx.load(src),
        ("load", "onnx-light"): lambda: onnxl.load(src),
        ("load", "onnx-ir + read every tensor"): lambda: read_all_ir(src),
        ("load", "onnx-ir (lazy)"): lambda: ir.load(src),
        ("load", "onnx-light (load_external_data=False)"): lambda: onnxl.load(
            src, load_external_data=False
        ),
        # 2. save from memory
        ("save", "onnx"): lambda: onnx.save(proto, dst, save_as_external_data=True, location=data),
        ("save", "onnx-light"): lambda: onnxl.save(proto, dst, location=data),
        ("save", "onnx-ir"): lambda: ir.save(ir_model, dst, external_data=data),
        # 3. re-align: onnx.save has no alignment option, its row only re-saves
        ("re-align to 4096", "onnx: load + save"): lambda: onnx.save(
            onnx.load(src), dst, save_as_external_data=True, location=data
        ),
        ("re-align to 4096", "onnx-light: load + save"): lambda: onnxl.save(
            onnxl.load(src), dst, location=data, options=aligned
        ),
        ("re-align to 4096", "onnx-ir: load + save"): lambda: ir.save(
            ir.load(src), dst, external_data=data, alignment=4096
        ),
        ("re-align to 4096", "onnx-light: align_external_data_streaming"): lambda: (
            onnxl.align_external_data_streaming(src, dst, data, 4096)
        ),
    }


# %%
# Measure
# -------
#
# One measure per model size: every operation once per round, in a new
# order each round, the destination folder emptied before each run (a save
# over an existing weights file is not what we measure).

tmp = tempfile.TemporaryDirectory()
rows = []
begin_all = time.perf_counter()
for n in COUNTS:
    size = weights_nbytes(n, DIM)
    folder = os.path.join(tmp.name, f"n{n}")
    out = empty_folder(os.path.join(folder, "out"))
    src = os.path.join(folder, "model.onnx")
    proto = make_gemm_model(n, DIM)
    source = onnx.ModelProto()
    source.CopyFrom(proto)  # onnx.save turns the tensors it is given into references
    onnx.save(source, src, save_as_external_data=True, location="model.onnx.data")
    ops = operations(src, out, proto)
    rounds = measure_rounds(
        {" | ".join(key): fn for key, fn in ops.items()},
        warm_files=[src, src + ".data"],
        before=lambda _name, out=out: empty_folder(out),
    )
    for operation, library in ops:
        secs = rounds.seconds(f"{operation} | {library}")
        rows.append(
            {
                "operation": operation,
                "library": library,
                "MiB": size / MiB,
                "seconds": float(np.median(secs)),
                "min": min(secs),
                "max": max(secs),
                "rounds": secs,
            }
        )
    # every library writes the same tensors (onnx.save, which would change
    # `proto` here, wrote the source itself)
    for (operation, library), fn in ops.items():
        if operation != "load" and (operation, library) != ("save", "onnx"):
            empty_folder(out)
            fn()
            saved = onnx.load(f"{out}/m.onnx")
            assert [t.raw_data for t in saved.graph.initializer] == [
                t.raw_data for t in proto.graph.initializer
            ], library
    del proto, ops

print(f"measured in {time.perf_counter() - begin_all:.1f} s")
df = pandas.DataFrame(rows)
df["MiB"] = df["MiB"].round(1)
df["MiB/s"] = (df["MiB"] / df["seconds"]).round(0)
# a load that reads no weight has no throughput of weights
NO_WEIGHTS_READ = ["onnx-light (load_external_data=False)", "onnx-ir (lazy)"]
df.loc[df["library"].isin(NO_WEIGHTS_READ), "MiB/s"] = float("nan")

# %%
# The numbers
# -----------
#
# Median seconds, one column per model size (MiB of weights):

df.pivot_table(index=["operation", "library"], columns="MiB", values="seconds", sort=False).round(4)

# %%
# At the largest size, the median with its spread (min-max over the rounds)
# and the ratio of medians to onnx (lower is faster):

largest = df[df["MiB"] == df["MiB"].max()].copy()
is_onnx = largest["library"].isin(["onnx", "onnx: load + save"])
onnx_time = dict(zip(largest[is_onnx]["operation"], largest[is_onnx]["seconds"], strict=True))
largest["vs onnx"] = (largest["seconds"] / largest["operation"].map(onnx_time)).round(2)
largest["min-max (s)"] = [f"{a:.3g}-{b:.3g}" for a, b in zip(largest["min"], largest["max"])]
largest[["operation", "library", "seconds", "min-max (s)", "MiB/s", "vs onnx"]].rename(
    columns={"seconds": "median (s)"}
).set_index(["operation", "library"]).round(3)

# %%
# What it says
# ------------
#
# onnx-light against each other library, operation by operation, at the
# largest size, in the words of the gallery report (measured once, with more
# rounds): a ranking only when it holds beyond the spread of its rounds,
# otherwise within this machine's noise
# (``benchmarks.harness.Comparison.sentence``). Each sentence then says
# where this build's own ratio falls against the report's range.

print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
ours = {
    "load": "onnx-light",
    "save": "onnx-light",
    "re-align to 4096": "onnx-light: align_external_data_streaming",
}
for operation, mine in ours.items():
    part = largest[largest["operation"] == operation].set_index("library")
    for other in part.index:
        if other != mine and other not in NO_WEIGHTS_READ:
            a, b = part.loc[mine, "rounds"], part.loc[other, "rounds"]
            print(compare(mine, a, other, b, context=operation).sentence())

# %%
# Is saving a model already in memory cheaper than loading it and saving
# it? It should be: the load is the extra work.

save_row = largest[(largest["operation"] == "save") & (largest["library"] == "onnx-light")]
both_row = largest[largest["library"] == "onnx-light: load + save"]
print(
    compare(
        "onnx-light save (model in memory)",
        save_row["rounds"].iloc[0],
        "onnx-light load + save",
        both_row["rounds"].iloc[0],
    ).sentence()
)

# %%
# Why, whatever the ranking of a given run:
#
# * **load**: onnx and onnx-light both read every tensor from the file into
#   a buffer, then copy it into the protobuf message's ``raw_data`` (two
#   copies). onnx-ir's lazy load reads nothing at first; reading its tensors
#   afterwards goes through a memory map of the page cache (one copy).
#   onnx-light's metadata-only load (``load_external_data=False``) parses the
#   small ``.onnx`` alone.
# * **save**: onnx-light writes the tensors with ``pwrite`` at planned
#   offsets and leaves the model unchanged; onnx writes tensor after tensor
#   and turns the model's tensors into references (its caller pays a copy
#   first to keep the model, not counted here).
# * **re-align**: the streaming helper copies the bytes file to file in the
#   kernel, never holding the weights in memory; onnx-ir writes from its
#   memory map; a full load + save reads and writes everything, and onnx
#   cannot align the offsets at all.
#
# What does not depend on the machine is checked: every library saved the
# same tensors (asserted while measuring), and the streaming re-align never
# holds the weights (see :ref:`l-example-plot-align-external-data-streaming`).

# %%
# The result in one picture: re-aligning the largest model, each way.

# sphinx_gallery_thumbnail_number = 1
realign = largest[largest["operation"] == "re-align to 4096"].sort_values("seconds")
summary_bars(
    list(realign["library"]),
    dict(zip(realign["library"], realign["rounds"], strict=True)),
    "s",
    f"re-align to 4096, {realign['MiB'].iloc[0]:.0f} MiB of weights",
    # each library its colour; onnx-light's load + save a lighter shade than its streaming
    colors=[tool_color(lib, int(lib == "onnx-light: load + save")) for lib in realign["library"]],
)
plt.show()

# %%
# Plot
# ----
#
# Time against model size, log-log, each point the median of the rounds
# and its bar their min-max: a slope of one means the cost is
# proportional to the bytes; the gap between two lines is the ratio of their
# times.

operations = list(dict.fromkeys(df["operation"]))
fig, axes = plt.subplots(len(operations), 1, figsize=(9, 3.4 * len(operations)))
markers = {"onnx": "o", "onnx-light": "s", "onnx-ir": "^"}
for ax, operation in zip(axes, operations, strict=True):
    part = df[df["operation"] == operation]
    for library in dict.fromkeys(part["library"]):
        line = part[part["library"] == library]
        family = library.split(" ")[0].rstrip(":")
        color, marker = tool_color(family), markers[family]
        dashed = "lazy" in library or "False" in library or "streaming" in library
        ax.errorbar(
            line["MiB"],
            line["seconds"],
            yerr=[line["seconds"] - line["min"], line["max"] - line["seconds"]],
            capsize=3,
            marker=marker,
            color=color,
            ls="--" if dashed else "-",
            label=library,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = sorted(part["MiB"].unique())
    ax.set_xticks(sizes, [f"{m:g}" for m in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("MiB of weights")
    ax.set_ylabel("seconds")
    ax.set_title(f"{operation} (median, bars: min-max; lower is better)")
    ax.grid(alpha=0.3, which="both")
    legend_beside(ax)
fig.tight_layout()
plt.show()

# %%
# Clean up.

tmp.cleanup()

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-threads-load-save`
# * :ref:`l-example-plot-profile-external-data-save`
# * :ref:`l-example-plot-align-external-data-streaming`
