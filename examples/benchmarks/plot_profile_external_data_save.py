"""
.. _l-example-plot-profile-external-data-save:

Profiling a save with external data: onnx and onnx-light
========================================================

Where does the time go when a model held in memory is saved as two files
(``model.onnx`` and a weights file)? We run :mod:`cProfile` on

* :func:`onnx.save` with ``save_as_external_data=True``;
* :func:`onnx_light.onnx.save` with ``location=`` (aligned to 4096 bytes),

turn the statistics into :class:`pandas.DataFrame` tables (``pstats`` keeps
them in a dictionary), and sort the functions into a few kinds of work:
system calls that write, opening and closing files, protobuf serialization,
and the libraries' own Python code.

cProfile only sees the thread that calls it: onnx-light's parallel writers
would hide their work in other threads, so it is profiled with
``num_threads=1``. The profiler slows the code it watches, so the wall
times are measured apart, without it, each save in a process of its own in
interleaved rounds (``benchmarks.harness.measure_rounds``, the method of
``make bench``).
"""

# %%
# Sizes and imports
# -----------------

import cProfile
import os
import pstats
import tempfile
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import onnx
import pandas

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    describe_machine,
    empty_folder,
    make_gemm_model,
    measure_rounds,
    other_color,
    sized,
    summary_bars,
    tensor_places,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((64, 1024), quick=(4, 128))
MiB = 2**20

model = make_gemm_model(N_WEIGHTS, DIM)
size = weights_nbytes(N_WEIGHTS, DIM)
print(f"{N_WEIGHTS} weights of {DIM}x{DIM} float32: {size / MiB:.0f} MiB")

# %%
# Time and profile both saves
# ---------------------------
#
# Each save writes into an empty folder, emptied before each run. It runs
# in a process of its own, so :func:`onnx.save`, which turns the tensors of
# the model it saves into references, changes that process's copy only.

tmp = tempfile.TemporaryDirectory()
out = empty_folder(os.path.join(tmp.name, "out"))


def save_with_onnx() -> None:
    onnx.save(model, f"{out}/m.onnx", save_as_external_data=True, location="m.onnx.data")


def save_with_onnx_light() -> None:
    opts = onnxl.SerializeOptions(alignment=4096, num_threads=1)
    onnxl.save(model, f"{out}/m.onnx", location="m.onnx.data", options=opts)


saves = {"onnx": save_with_onnx, "onnx-light": save_with_onnx_light}
timed = measure_rounds(saves, before=lambda _name: empty_folder(out))


def profiled(name: str) -> None:
    """One more save of ``name``, under cProfile; its statistics go to a file."""
    prof = cProfile.Profile()
    prof.runcall(saves[name])
    prof.dump_stats(os.path.join(tmp.name, f"{name}.prof"))


profile_runs = {name: lambda n=name: profiled(n) for name in saves}
measure_rounds(profile_runs, rounds=1, before=lambda _name: empty_folder(out))
profiles = {name: pstats.Stats(os.path.join(tmp.name, f"{name}.prof")) for name in saves}
empty_folder(out)

# %%
# From pstats to pandas
# ---------------------
#
# ``Stats.stats`` maps ``(file, line, function)`` to ``(primitive calls,
# calls, own time, cumulative time, callers)``.


def short_name(key: tuple[str, int, str]) -> str:
    """``onnx/external_data_helper.py:298(save_external_data)``, or the built-in's name."""
    file, line, func = key
    if file == "~":  # a built-in: "<method 'write' of '_io.BufferedRandom' objects>"
        return func.strip("<>").replace("built-in method ", "")
    parts = file.replace(os.sep, "/").split("/")
    if "site-packages" in parts:
        file = "/".join(parts[parts.index("site-packages") + 1 :])
    elif "onnx_light" in parts:
        file = "/".join(parts[parts.index("onnx_light") :])
    return f"{file}:{line}({func})"


def to_frame(stats: pstats.Stats) -> pandas.DataFrame:
    rows = [
        (short_name(key), calls, own, cumulative)
        for key, (_prim, calls, own, cumulative, _callers) in stats.stats.items()
    ]
    df = pandas.DataFrame(rows, columns=["function", "calls", "own s", "cumulative s"])
    df = df.sort_values("own s", ascending=False, ignore_index=True)
    df["own %"] = (100 * df["own s"] / df["own s"].sum()).round(1)
    return df


frames = {name: to_frame(stats) for name, stats in profiles.items()}
pandas.set_option("display.max_colwidth", 80)
pandas.set_option("display.width", 200)

# %%
# The top functions of onnx's save, by own time (time spent in the function
# itself, not in the functions it calls):

frames["onnx"].set_index("function").head(10).round(4)

# %%
# The top functions of onnx-light's save:

frames["onnx-light"].set_index("function").head(10).round(4)

# %%
# Reading ``raw_data`` copies it
# ------------------------------
#
# Python functions that do little show a large own time in both tables:
# every ``tensor.raw_data`` read copies the tensor's bytes out of the
# protobuf message into a new ``bytes`` object, and that copy is counted in
# the function that reads the field. onnx reads it twice per tensor: once to
# measure its size (``sys.getsizeof(tensor.raw_data)`` in
# ``convert_model_to_external_data``), once to write it
# (``save_external_data``); onnx-light reads it once, to write it
# (``_write_raw``). What one read of every tensor costs:


def read_every_raw_data() -> None:
    for tensor in model.graph.initializer:
        tensor.raw_data  # noqa: B018


copy_s = float(np.median(measure_rounds({"read": read_every_raw_data}).seconds("read")))
print(f"reading raw_data of {N_WEIGHTS * 2} tensors ({size / MiB:.0f} MiB): {copy_s:.4f} s")

# %%
# Where the time goes
# -------------------
#
# Each function's own time lands in one kind of work:

KINDS = {
    "write system calls": ["write", "pwrite", "copy_file_range", "splice", "sendfile", "ftruncate"],
    "open, close, rename, stat": [
        "open",
        "close",
        "__exit__",
        "fdopen",
        "replace",
        "stat",
        "unlink",
        "remove",
        "fsync",
        "lseek",
        "seek",
        "tell",
        "exists",
        "isdir",
        "realpath",
        "abspath",
    ],
    "protobuf": ["SerializeToString", "ParseFromString", "CopyFrom", "MergeFrom", "ByteSize"],
}


def kind_of(function: str) -> str:
    if ".py:" not in function and "(" not in function:
        name = function.replace("'", " ").replace(".", " ").split()
        for kind, words in KINDS.items():
            if any(w in name for w in words):
                return kind
        return "other built-ins"
    func = function.rsplit("(", 1)[-1].rstrip(")")
    for kind, words in KINDS.items():
        if func in words:
            return kind
    return "Python code (incl. raw_data copies)"


summary = {}
for name, df in frames.items():
    df["kind"] = df["function"].map(kind_of)
    summary[name] = df.groupby("kind")["own s"].sum()
summary = pandas.DataFrame(summary).fillna(0.0)
summary.loc["total (profiled)"] = summary.sum()
wall = {name: timed.seconds(name) for name in saves}
print(
    "wall time (s, median and min-max over rounds, without the profiler): "
    + ", ".join(f"{k} {np.median(v):.4f} ({min(v):.4f}-{max(v):.4f})" for k, v in wall.items())
)
summary.round(4).rename(columns=lambda c: f"{c} (s)")

# %%
# What it says
# ------------
#
# The bytes must be written either way. In words, from this build's profile
# (own time per kind of work; ``copy_s`` is the cost of reading every
# ``raw_data`` once, measured above):

print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
for kind in [k for k in summary.index if k != "total (profiled)"]:
    a, b = summary.loc[kind, "onnx"], summary.loc[kind, "onnx-light"]
    print(
        f"{kind}: onnx {a:.4f} s, onnx-light {b:.4f} s "
        f"({a / copy_s:.1f}x and {b / copy_s:.1f}x the cost of reading every raw_data once)"
    )
print(timed.compare("onnx-light", "onnx").sentence())

# %%
# Why: onnx copies every tensor out of the protobuf message twice and
# onnx-light once, and onnx opens and closes the weights file
# once per tensor; the write system calls copy the bytes into the page cache
# in both. Beyond speed, onnx-light writes to temporary files replaced at the
# end (a crash leaves no half file), aligns offsets, and leaves the model
# unchanged, so the caller does not need the copy that ``onnx.save`` requires
# (not counted here).

# %%
# What it says, checked
# ---------------------
#
# The claims above that this run can check, checked (the script stops if one
# is false): the model has ``2 * N_WEIGHTS`` tensors; onnx opens the weights
# file once per tensor it moves out (one ``open`` call each, in its profile);
# both saves spend time in write system calls; onnx's save turns the tensors
# of the model it saves into references, so a caller who keeps using the
# model needs a copy, while onnx-light's leaves it unchanged, aligns every
# offset to 4096, and writes the same tensors as onnx.

assert len(model.graph.initializer) == 2 * N_WEIGHTS
for name, df in frames.items():
    assert df.loc[df["kind"] == "write system calls", "calls"].sum() > 0, name


def saved_tensors(path: str) -> dict[str, bytes]:
    """The bytes of every tensor of a saved model, by name."""
    return {
        t.name: onnx.numpy_helper.to_array(t).tobytes() for t in onnx.load(path).graph.initializer
    }


before = model.SerializeToString()
save_with_onnx_light()
assert model.SerializeToString() == before, "onnx-light's save changed the model"
offsets = tensor_places(f"{out}/m.onnx").offset
assert len(offsets) and (offsets % 4096 == 0).all(), offsets
light_values = saved_tensors(f"{out}/m.onnx")
empty_folder(out)

copy = onnx.ModelProto()
copy.CopyFrom(model)
onnx.save(copy, f"{out}/m.onnx", save_as_external_data=True, location="m.onnx.data")
moved = [t for t in copy.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
assert moved, "onnx.save left the model it saved as it was"
opens = frames["onnx"].loc[frames["onnx"]["function"].isin(["io.open", "_io.open"]), "calls"].sum()
assert opens >= len(moved), f"onnx opened files {opens} times for {len(moved)} tensors"
assert light_values == saved_tensors(f"{out}/m.onnx"), "the two saves wrote different tensors"
empty_folder(out)
print(
    f"checked: onnx opened files {opens} times for {len(moved)} tensors moved out, and changed "
    f"the model it saved; onnx-light left the model unchanged, {len(offsets)} offsets aligned "
    "to 4096, the same tensors as onnx"
)

# %%
# The result in one picture: the wall time of each save, median and
# min-max over the rounds.

# sphinx_gallery_thumbnail_number = 1
summary_bars(list(wall), wall, "s", f"save of {size / MiB:.0f} MiB")
plt.show()

# %%
# Plot
# ----
#
# Left, the time of each kind of work, stacked; right, the functions with
# the largest own time in each library.

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [1, 1.6]})
kinds = [k for k in summary.index if k != "total (profiled)"]  # kinds of work: no tool's colour
TOP = 6
tops = {name: df.head(TOP) for name, df in frames.items()}
totals = summary.loc[kinds, list(frames)].sum().max()
left = np.zeros(len(frames))
for i, kind in enumerate(kinds):
    values = summary.loc[kind, list(frames)].to_numpy()
    # a legend entry only for a kind the reader can see: a bar here, or among the top functions
    listed = any((top["kind"] == kind).any() for top in tops.values())
    seen = listed or values.max() > 0.002 * totals
    ax0.barh(list(frames), values, left=left, color=other_color(i), label=kind if seen else None)
    left += values
ax0.set_xlabel(f"seconds per save of {size / MiB:.0f} MiB (own time, cProfile)")
for k in (1, 2):
    label = "reading every raw_data once, twice" if k == 1 else None
    ax0.axvline(k * copy_s, color="k", ls=":", lw=1, label=label)
    ax0.text(k * copy_s, -0.45, f"{k}x", fontsize=8, ha="center")
ax0.set_title("where the time goes")
ax0.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
ax0.invert_yaxis()

labels, values, colors = [], [], []
for j, (name, top) in enumerate(tops.items()):
    for _, row in top.iterrows():
        labels.append(f"{name}: {row['function'][:70]}")
        values.append(row["own s"])
        colors.append(other_color(kinds.index(row["kind"])))
    if j == 0:
        labels.append("")
        values.append(0.0)
        colors.append("white")
y = np.arange(len(labels))
bars = ax1.barh(y, values, color=colors)
ax1.bar_label(bars, labels=[f"{v:.4f}" if v else "" for v in values], fontsize=8, padding=2)
ax1.set_yticks(y, labels, fontsize=8)
ax1.invert_yaxis()
ax1.set_xlabel("own seconds per save")
ax1.set_title(f"top {TOP} functions of each (colour = kind of work)")
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
# * :ref:`l-example-plot-threads-load-save`
