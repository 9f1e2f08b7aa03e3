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
Each measurement is repeated and the best time kept. Loads are timed with
the files in the page cache and after evicting them; saves write to the page
cache (the kernel flushes to disk later).
"""

# %%
# Sizes and imports
# -----------------

import os
import tempfile

import matplotlib.pyplot as plt
import onnx
import pandas

import onnx_light.onnx as onnxl
from onnx_light.bench import (
    best_time,
    describe_machine,
    evict,
    make_gemm_model,
    summary_bars,
    weights_nbytes,
)

SMALL = os.environ.get("UNITTEST_GOING", "0") == "1"
N_WEIGHTS, DIM = (4, 128) if SMALL else (32, 1024)


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
# so it always gets a fresh copy.


def fresh_copy() -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


tmp = tempfile.TemporaryDirectory()
folders = {}
for name in ["one file", "two files", "one file per tensor"]:
    folders[name] = os.path.join(tmp.name, name.replace(" ", "_"))
    os.mkdir(folders[name])
sources = {name: os.path.join(folder, "model.onnx") for name, folder in folders.items()}
onnx.save(model, sources["one file"])
onnx.save(
    fresh_copy(), sources["two files"], save_as_external_data=True, location="model.onnx.data"
)
onnx.save(
    fresh_copy(),
    sources["one file per tensor"],
    save_as_external_data=True,
    all_tensors_to_one_file=False,
)
pandas.DataFrame(
    [{"layout": name, "files": len(os.listdir(folder))} for name, folder in folders.items()]
)

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
    """Drop the files of ``folder`` from the page cache (:func:`onnx_light.bench.evict`)."""
    evict(os.path.join(folder, f) for f in os.listdir(folder))


caches = ["warm", "cold"] if hasattr(os, "posix_fadvise") else ["warm"]
rows = []
for cache in caches:
    for name, path in sources.items():
        setup = (lambda f=folders[name]: evict_folder(f)) if cache == "cold" else None
        operation = f"load ({cache})"
        rows.append(
            {
                "operation": operation,
                "layout": name,
                "library": "onnx",
                "threads": 0,
                "seconds": best_time(lambda p=path: onnx.load(p), setup),
            }
        )
        for k in THREADS:
            rows.append(
                {
                    "operation": operation,
                    "layout": name,
                    "library": "onnx-light",
                    "threads": k,
                    "seconds": best_time(lambda p=path, k=k: onnxl.load(p, num_threads=k), setup),
                }
            )

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
# :func:`onnx.save` *appends* to an external data file that already exists
# (saving twice doubles it), and replacing a large file costs its deletion,
# which is not what we want to measure. :func:`onnx.save` also turns the
# tensors of the model it is given into references, so each call gets a
# fresh copy, made outside the timing too (onnx-light leaves the model
# unchanged and needs none).

dst = os.path.join(tmp.name, "dst")
os.mkdir(dst)
dst_onnx = os.path.join(dst, "model.onnx")
referencing = onnxl.load(sources["one file per tensor"], load_external_data=False)


pending = {}


def empty_destination() -> None:
    for f in os.listdir(dst):
        os.remove(os.path.join(dst, f))


def prepare_onnx_save() -> None:
    empty_destination()
    pending["copy"] = fresh_copy()


def onnx_save(layout: str) -> None:
    copy = pending.pop("copy")
    if layout == "one file":
        onnx.save(copy, dst_onnx)
    elif layout == "two files":
        onnx.save(copy, dst_onnx, save_as_external_data=True, location="model.onnx.data")
    else:
        onnx.save(copy, dst_onnx, save_as_external_data=True, all_tensors_to_one_file=False)


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


for name in sources:
    rows.append(
        {
            "operation": "save (warm)",
            "layout": name,
            "library": "onnx",
            "threads": 0,
            "seconds": best_time(lambda n=name: onnx_save(n), prepare_onnx_save),
        }
    )
    for k in THREADS:
        rows.append(
            {
                "operation": "save (warm)",
                "layout": name,
                "library": "onnx-light",
                "threads": k,
                "seconds": best_time(lambda n=name, k=k: onnxl_save(n, k), empty_destination),
            }
        )

df = pandas.DataFrame(rows)
df["MiB/s"] = (size / MiB / df["seconds"]).round(0)
df["seconds"] = df["seconds"].round(4)

# %%
# The numbers
# -----------

df["who"] = [
    "onnx" if lib == "onnx" else f"onnx-light, {k} thread{'s' if k > 1 else ''}"
    for lib, k in zip(df["library"], df["threads"], strict=True)
]
# Seconds per operation:

df.pivot(index=["operation", "layout"], columns="who", values="seconds")

# %%
# The same as throughput (MiB/s, higher is better):

df.pivot(index=["operation", "layout"], columns="who", values="MiB/s")

# %%
# What it says
# ------------
#
# The speed-up of 4 threads over 1, per operation and layout:

speedup = df[df["library"] == "onnx-light"].pivot(
    index=["operation", "layout"], columns="threads", values="seconds"
)
(speedup[1] / speedup[4]).round(2).rename("speed with 4 threads / with 1").to_frame()

# %%
# In words, from this build's numbers (they move from one run to the next on
# a shared machine: the page prints them rather than stating them):

print(f"measured on {describe_machine()}")
ratio = (speedup[1] / speedup[4]).rename("gain")


def no_parallel_work(operation: str, layout: str) -> str | None:
    """Why num_threads cannot change a case: there is one file to read or nothing to
    write in parallel (load reads each data file with one reader)."""
    if operation.startswith("load") and layout != "one file per tensor":
        return "at most one data file: one reader"
    if operation.startswith("save") and layout == "one file":
        return "no weights file to write"
    return None


for (operation, layout), gain in ratio.items():
    why = no_parallel_work(operation, layout)
    if why is not None:
        print(f"{operation}, {layout}: num_threads changes nothing ({why}); {gain:.2f}x is noise")
        continue
    verdict = "faster" if gain > 1.1 else "slower" if gain < 0.9 else "no faster"
    print(f"{operation}, {layout}: with 4 threads {gain:.2f}x the speed of 1 ({verdict})")
ratio = ratio[[no_parallel_work(op, layout) is None for op, layout in ratio.index]]
best = ratio.idxmax()
if ratio.max() > 1.1:
    print(f"threads paid off most for {best[0]}, {best[1]}: {ratio.max():.2f}x")
else:
    print("threads paid off in no case on this machine, in this build")
print(
    f"the default num_threads=None uses at most {min(4, os.cpu_count() or 1)} threads "
    "here (one per data file, at most 4 and the CPUs)"
)

# %%
# Why:
#
# * with the files in the **page cache**, loading is a memory copy, and one
#   thread is often enough to saturate it: more threads then add only their
#   own cost;
# * from **disk**, the one-file-per-tensor layout is where threads help
#   most: one tensor per file means one ``open`` and one small read per
#   tensor, and parallel readers keep the disk busy while the others wait;
# * a **single-file** model is one protobuf message, read and parsed (or
#   serialized and written) in one go; what threads change there comes from
#   the reads of its file, not from parsing;
# * **saves** write to the page cache, which is fast and noisy. Gathering
#   many files into one weights file copies in the kernel and needs no
#   threads at all.
#
# The default (``num_threads=None``) is one thread per data file, at most 4
# and the number of CPUs (see :class:`onnx_light.onnx.SerializeOptions` and
# :func:`onnx_light.onnx.load`). Threads pay off when reads wait: cold files,
# many files, fast NVMe disks with more cores, network file systems with high
# latency. Measure on the machine that matters.

# %%
# The result in one picture: what 4 threads do to the speed of 1, per case.

summary_bars(
    [f"{op}, {layout}" for op, layout in ratio.index],
    list(ratio.values),
    "x",
    "speed with 4 threads / with 1",
    reference=1.0,
    reference_label="no change",
)
plt.show()

# %%
# Plot
# ----
#
# Throughput against the number of threads, one line per layout; the dashed
# horizontal lines are onnx, which has no threads, in the same colours.

operations = list(dict.fromkeys(df["operation"]))
fig, axes = plt.subplots(1, len(operations), figsize=(5 * len(operations), 4.8), sharey=True)
for ax, operation in zip(axes, operations, strict=True):
    part = df[df["operation"] == operation]
    for i, name in enumerate(sources):
        light = part[(part["library"] == "onnx-light") & (part["layout"] == name)]
        ref = part[(part["library"] == "onnx") & (part["layout"] == name)]
        color = f"C{i}"
        ax.plot(light["threads"], light["MiB/s"], "o-", color=color, label=f"onnx-light, {name}")
        ax.axhline(float(ref["MiB/s"].iloc[0]), color=color, ls="--", lw=1, label=f"onnx, {name}")
    ax.set_xticks(THREADS)
    ax.set_xlabel("num_threads")
    ax.set_title(f"{operation}, {size / MiB:.0f} MiB")
    ax.grid(alpha=0.3)
axes[0].set_ylabel("MiB/s (higher is better)")
axes[-1].legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.0, 1.0))
fig.tight_layout()
if os.environ.get("SAVE_FIG"):
    fig.savefig(os.environ["SAVE_FIG"])
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
