"""
.. _l-example-plot-threads-load-save:

Load and save time against the number of threads
================================================

:func:`onnx_light.onnx.load` reads external tensors with ``num_threads``
parallel positional reads (``os.pread``), and
:func:`onnx_light.onnx.save` writes in-memory tensors with
``SerializeOptions.num_threads`` parallel writers at their planned offsets.
Does it help, and for which layout?

We time both with 1, 2 and 4 threads for the three usual layouts of a model:

* **one file**: every weight inline in the ``.onnx``;
* **two files**: the ``.onnx`` and one weights file;
* **one file per tensor**: what ``onnx.save(..., save_as_external_data=True,
  all_tensors_to_one_file=False)`` writes, one file named after each tensor.

:func:`onnx.load` and :func:`onnx.save` give a reference for each layout.
Each call runs in a process of its own, in interleaved rounds
(``benchmarks.harness.measure_rounds``, the method of ``make bench``), and
the tables give the median over the rounds. Loads are timed with the files
in the page cache and after evicting them; saves write to the page cache
(the kernel flushes to disk later).
"""

# %%
# Sizes and imports
# -----------------

import os
import tempfile
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import onnx
import pandas

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    compare,
    describe_machine,
    empty_folder,
    evict,
    legend_beside,
    make_gemm_model,
    measure_rounds,
    sized,
    summary_bars,
    tool_color,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((16, 1024), quick=(4, 128))
THREADS = [1, 2, 4]
MiB = 2**20

model = make_gemm_model(N_WEIGHTS, DIM)
size = weights_nbytes(N_WEIGHTS, DIM)
print(f"{N_WEIGHTS} weights of {DIM}x{DIM} float32: {size / MiB:.0f} MiB, {os.cpu_count()} CPUs")


# %%
# The three layouts
# -----------------
#
# :func:`onnx.save` turns the tensors of the model it saves into references,
# so it gets a fresh copy.


def onnx_save(model: onnx.ModelProto, path: str, layout: str) -> None:
    """:func:`onnx.save` in one of the three layouts."""
    if layout == "one file":
        onnx.save(model, path)
    elif layout == "two files":
        onnx.save(model, path, save_as_external_data=True, location="model.onnx.data")
    else:
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=False)


tmp = tempfile.TemporaryDirectory()
layouts = ["one file", "two files", "one file per tensor"]
folders = {name: empty_folder(os.path.join(tmp.name, name.replace(" ", "_"))) for name in layouts}
sources = {name: os.path.join(folder, "model.onnx") for name, folder in folders.items()}
for name, path in sources.items():
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx_save(copy, path, name)
pandas.Series({name: len(os.listdir(f)) for name, f in folders.items()}, name="files")

# %%
# Both libraries load the same tensors.

for path in sources.values():
    a = onnx.load(path)
    b = onnxl.load(path, num_threads=2)
    assert [t.raw_data for t in a.graph.initializer] == [t.raw_data for t in b.graph.initializer]
    del a, b

# %%
# Loading
# -------
#
# Twice: with the files in the page cache (*warm*: the cost of the software),
# and after evicting them (*cold*: the disk is read again). Evicting uses
# ``fsync`` then ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the files of the
# layout only: no root rights needed, nothing else on the machine is
# affected.


def evict_folder(folder: str) -> None:
    """Drop the files of ``folder`` from the page cache (``benchmarks.harness.evict``)."""
    evict(os.path.join(folder, f) for f in os.listdir(folder))


def who(threads: int) -> str:
    return "onnx" if threads == 0 else f"onnx-light, {threads} thread{'s' if threads > 1 else ''}"


rows = []


def measure(operation: str, calls: dict, **how) -> None:
    """Measure ``{(layout, threads): call}`` in rounds; one row per call."""
    rounds = measure_rounds(
        {f"{layout} | {k}": fn for (layout, k), fn in calls.items()},
        rounds=sized(3, quick=1),
        **how,
    )
    for layout, k in calls:
        secs = rounds.seconds(f"{layout} | {k}")
        rows.append(
            {
                "operation": operation,
                "layout": layout,
                "who": who(k),
                "threads": k,
                "seconds": float(np.median(secs)),
                "rounds": secs,
            }
        )


loads = {}
for name, path in sources.items():
    loads[(name, 0)] = lambda p=path: onnx.load(p)
    for k in THREADS:
        loads[(name, k)] = lambda p=path, k=k: onnxl.load(p, num_threads=k)
every_file = [os.path.join(f, n) for f in folders.values() for n in os.listdir(f)]
measure("load (warm)", loads, warm_files=every_file)
if hasattr(os, "posix_fadvise"):
    measure("load (cold)", loads, before=lambda case: evict_folder(folders[case.split(" | ")[0]]))

# %%
# Saving
# ------
#
# The same three layouts as destinations. onnx-light writes one file or two;
# for the third we start from a model whose tensors still point at one file
# per tensor (``load_external_data=False``) and gather them into one aligned
# weights file: those bytes are moved file to file by the kernel
# (``copy_file_range``), and the threads, which only write tensors held in
# memory, have nothing to do.
#
# The destination folder is emptied before every save, outside the timing:
# replacing a large file costs its deletion, which is not what we want to
# measure. :func:`onnx.save` turns the tensors of the model it is given into
# references: in a process of its own, it changes that process's copy only,
# so it is given ``model`` itself.

dst = empty_folder(os.path.join(tmp.name, "dst"))
dst_onnx = os.path.join(dst, "model.onnx")
referencing = onnxl.load(sources["one file per tensor"], load_external_data=False)


def onnxl_save(layout: str, threads: int) -> None:
    opts = onnxl.SerializeOptions(alignment=4096, num_threads=threads)
    if layout == "one file":
        onnxl.save(model, dst_onnx, options=opts)
    elif layout == "two files":
        onnxl.save(model, dst_onnx, location="model.onnx.data", options=opts)
    else:
        opts.use_external_data_location = False
        opts.base_dir = folders["one file per tensor"]
        onnxl.save(referencing, dst_onnx, location="model.onnx.data", options=opts)


saves = {}
for name in sources:
    saves[(name, 0)] = lambda n=name: onnx_save(model, dst_onnx, n)
    for k in THREADS:
        saves[(name, k)] = lambda n=name, k=k: onnxl_save(n, k)
measure("save (warm)", saves, before=lambda _case: empty_folder(dst))

df = pandas.DataFrame(rows)
df["MiB/s"] = (size / MiB / df["seconds"]).round(0)
df["seconds"] = df["seconds"].round(4)

# %%
# The numbers
# -----------

# Median seconds per operation:

df.pivot(index=["operation", "layout"], columns="who", values="seconds")

# %%
# The same as throughput (MiB/s, higher is better):

df.pivot(index=["operation", "layout"], columns="who", values="MiB/s")

# %%
# What it says
# ------------
#
# ``num_threads`` can act in three cases only: loading the model of one
# file per tensor (warm and cold), and saving into two files. Elsewhere
# there is one data file to read (a load never runs more readers than it
# has data files), no weights file to write, or only bytes the kernel
# copies file to file: what a ratio would show there is the machine's
# noise, so the table leaves those cases out.


def no_parallel_work(operation: str, layout: str) -> str | None:
    """Why num_threads cannot change a case: there is one file to read, nothing to
    write in parallel (load reads each data file with one reader), or only bytes the
    copy engine moves file to file."""
    if operation.startswith("load") and layout != "one file per tensor":
        return "at most one data file: one reader"
    if operation.startswith("save") and layout == "one file":
        return "no weights file to write"
    if operation.startswith("save") and layout == "one file per tensor":
        return "its bytes are copied file to file by the kernel: no writer thread"
    return None


# %%
# The speed-up of 4 threads over 1 (ratio of medians), where threads can act:

speedup = df[df["threads"] > 0].pivot(
    index=["operation", "layout"], columns="threads", values="seconds"
)
acts = [no_parallel_work(op, layout) is None for op, layout in speedup.index]
(speedup[1] / speedup[4])[acts].round(2).rename("speed with 4 threads / with 1").to_frame()

# %%
# In words, from the gallery report (measured once, with more rounds): 4
# threads against 1 is a ranking only when it holds beyond the spread of
# the report's rounds (``benchmarks.harness.compare``), else the two are
# within this machine's noise; each sentence then says where this build
# falls.

print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
ratio = (speedup[1] / speedup[4]).rename("gain")


def rounds_of(operation: str, layout: str, threads: int) -> list[float]:
    part = df[(df["operation"] == operation) & (df["layout"] == layout)]
    return part[part["threads"] == threads]["rounds"].iloc[0]


paid_off = []
for operation, layout in ratio.index:
    why = no_parallel_work(operation, layout)
    if why is not None:
        print(f"{operation}, {layout}: num_threads changes nothing ({why})")
        continue
    c = compare(
        "4 threads",
        rounds_of(operation, layout, 4),
        "1 thread",
        rounds_of(operation, layout, 1),
        context=f"{operation}, {layout}",
    )
    print(c.sentence())
    if c.first == "4 threads":
        paid_off.append(f"{operation}, {layout}")
if not paid_off:
    print("threads paid off beyond the noise in no case (the gallery report's verdicts)")
default = onnxl.check_setting("num_threads", None)
print(
    f"the default num_threads=None uses at most {default} thread{'s' if default > 1 else ''} "
    "here (one reader and one writer, unless more are asked for)"
)
ratio = ratio[[no_parallel_work(op, layout) is None for op, layout in ratio.index]]

# %%
# Why:
#
# * with the files in the **page cache**, loading is a memory copy that
#   protobuf makes while holding the GIL, and one reader keeps up with it:
#   more readers add their own cost;
# * from **disk**, the one-file-per-tensor layout is where parallel readers
#   can keep the disk busy while the others wait: one tensor per file means
#   one ``open`` and one small read per tensor. The rounds of
#   ``benchmarks/proofs/threads_proof.py`` (its report on
#   :ref:`l-howto-load-save-onnx-files`) found them faster there in most
#   rounds cold, and slower in most rounds warm, neither beyond the rounds'
#   spread;
# * a **single-file** model is one protobuf message, read and parsed in one
#   go, and a **two-file** model has one data file: ``num_threads`` has
#   nothing to spread;
# * **saves** write to the page cache, which is fast and noisy; more
#   writers changed nothing there. Gathering many files into one weights
#   file copies in the kernel and needs no threads at all.
#
# The default (``num_threads=None``) is therefore one reader and one writer
# (see :class:`onnx_light.onnx.SerializeOptions` and
# :func:`onnx_light.onnx.load`). More threads can pay off where reads wait
# (cold files, many files, fast NVMe disks with more cores, network file
# systems with high latency): ask for them, and measure on the machine that
# matters.

# %%
# The result in one picture: what 4 threads do to the speed of 1, per case
# (the ratio of the two times of each round: median and min-max).

# sphinx_gallery_thumbnail_number = 1
summary_bars(
    [f"{op}, {layout}" for op, layout in ratio.index],
    {
        f"{op}, {layout}": [
            a / b for a, b in zip(rounds_of(op, layout, 1), rounds_of(op, layout, 4), strict=True)
        ]
        for op, layout in ratio.index
    },
    "x",
    "speed with 4 threads / with 1, per round",
    reference=1.0,
    reference_label="no change",
    colors=[tool_color("onnx-light", list(sources).index(layout)) for _, layout in ratio.index],
)
plt.show()

# %%
# Plot
# ----
#
# Throughput against the number of threads, one line per layout (median
# of the rounds, bars from the slowest to the fastest); the dashed
# horizontal lines are onnx (median), which has no threads, in onnx's
# colour, the same shade for the same layout.

operations = list(dict.fromkeys(df["operation"]))
fig, axes = plt.subplots(len(operations), 1, figsize=(9, 3.4 * len(operations)), sharey=True)
markers = ["o", "s", "^"]  # one per layout; onnx-light's colour, onnx's for its lines
for ax, operation in zip(axes, operations, strict=True):
    part = df[df["operation"] == operation]
    for i, name in enumerate(sources):
        light = part[(part["threads"] > 0) & (part["layout"] == name)]
        ref = part[(part["threads"] == 0) & (part["layout"] == name)]
        speed = np.array([size / MiB / np.median(r) for r in light["rounds"]])
        fastest = np.array([size / MiB / min(r) for r in light["rounds"]])
        slowest = np.array([size / MiB / max(r) for r in light["rounds"]])
        ax.errorbar(
            light["threads"],
            speed,
            yerr=[speed - slowest, fastest - speed],
            fmt=f"{markers[i % 3]}-",
            capsize=3,
            color=tool_color("onnx-light", i),
            label=f"onnx-light, {name}",
        )
        onnx_speed = float(ref["MiB/s"].iloc[0])
        ax.axhline(onnx_speed, color=tool_color("onnx", i), ls="--", lw=1.2, label=f"onnx, {name}")
    ax.set_xticks(THREADS)
    ax.set_xlabel("num_threads")
    ax.set_ylabel("MiB/s")
    ax.set_title(f"{operation}, {size / MiB:.0f} MiB (median, bars: min-max; higher is better)")
    ax.grid(alpha=0.3)
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
# * :ref:`l-example-plot-load-save-time`
# * :ref:`l-example-plot-profile-external-data-save`
