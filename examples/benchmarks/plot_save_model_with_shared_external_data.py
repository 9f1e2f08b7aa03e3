"""
.. _l-example-plot-save-model-with-shared-external-data:

Save a variant that shares the weights of a first model
=======================================================

A fine-tuned model, an adapter, a model with one layer replaced: the
variant differs from a first model in a handful of weights. Saving it the
usual way writes **every** weight again, and needs all of them in memory.
:func:`onnx_light.onnx.save_model_with_shared_external_data` writes only the
new ones: the unchanged tensors keep pointing at the first model's weights
file, untouched.

This example builds a first model (24 float32 weights of 1024 x 1024,
96 MiB; 8 of 256 x 256 under ``UNITTEST_GOING=1``), saves it with external
data, makes a variant with three new weights, and compares

* **naive, onnx**: :func:`onnx.load` everything, replace, :func:`onnx.save_model`
  with external data;
* **naive, onnx-light**: the same with :func:`onnx_light.onnx.load` and
  :func:`onnx_light.onnx.save`;
* **shared**: :func:`onnx_light.onnx.load` with ``load_external_data=False``
  (references only), replace, save with
  :func:`~onnx_light.onnx.save_model_with_shared_external_data`;

on time, bytes written on disk and peak memory. Then it proves that
:mod:`onnx` and :mod:`onnxruntime` load the shared variant and compute the
right outputs.
"""

# %%
# The first model
# ---------------
#
# Saved with every weight in ``first.onnx.data``, aligned to 4096 so that a
# runtime can memory-map it.

import gc
import os
import shutil
import tempfile
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnxruntime
import pandas

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    describe_machine,
    empty_folder,
    file_digests,
    legend_beside,
    make_gemm_model,
    measure_rounds,
    median_bars,
    mib_on_disk,
    model_inputs,
    sized,
    summary_bars,
    tensor_places,
    tool_color,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((24, 1024), quick=(8, 256))
NEW = ["W0", "W1", "W2"]  # the weights the variant changes
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-shared-")
first = os.path.join(folder, "first.onnx")
opts = onnxl.SerializeOptions()
opts.alignment = 4096
onnxl.save(make_gemm_model(N_WEIGHTS, DIM), first, location="first.onnx.data", options=opts)
gc.collect()
first_files = file_digests(folder)  # their sha256, to check later that nothing changed them
print({name: os.path.getsize(os.path.join(folder, name)) for name in first_files})

# %%
# The new weights
# ---------------
#
# Three weights get new values, the kind of change a fine-tuning step
# makes. They are kept as numpy arrays to compute the expected outputs.

rng = np.random.default_rng(7)
new_weights = {
    name: (rng.standard_normal((DIM, DIM), dtype=np.float32) / np.float32(np.sqrt(DIM)))
    for name in NEW
}


def replace_weights(model: onnx.ModelProto) -> None:
    """Replace the initializers named in ``new_weights`` by inline tensors."""
    for i, init in enumerate(model.graph.initializer):
        if init.name in new_weights:
            tensor = onnxl.numpy_helper.from_array(new_weights[init.name], init.name)
            model.graph.initializer[i].CopyFrom(tensor)


# %%
# Three ways to save the variant
# ------------------------------
#
# Each function starts from ``first.onnx`` on disk and ends with a variant
# saved in the same folder. ``written`` lists the files it creates.


def naive_onnx() -> list[str]:
    model = onnx.load(first)
    replace_weights(model)
    onnx.save_model(
        model,
        os.path.join(folder, "naive_onnx.onnx"),
        save_as_external_data=True,
        location="naive_onnx.onnx.data",
    )
    return ["naive_onnx.onnx", "naive_onnx.onnx.data"]


def naive_onnx_light() -> list[str]:
    model = onnxl.load(first)
    replace_weights(model)
    dst = os.path.join(folder, "naive_light.onnx")
    onnxl.save(model, dst, location="naive_light.onnx.data", options=opts)
    return ["naive_light.onnx", "naive_light.onnx.data"]


def shared() -> list[str]:
    model = onnxl.load(first, load_external_data=False)  # references, no weight read
    replace_weights(model)
    onnxl.save_model_with_shared_external_data(
        model, os.path.join(folder, "variant.onnx"), options=opts
    )
    return ["variant.onnx", "variant.onnx.data"]


# %%
# Time, bytes written, peak memory
# --------------------------------
#
# Each call runs in a process of its own, in interleaved rounds
# (``benchmarks.harness.measure_rounds``, the method of ``make bench``),
# after the files of the previous run were removed (every file but the first
# model's: ``benchmarks.harness.empty_folder``). Peak memory is the
# growth of the kernel's ``VmHWM`` during the call. The table gives the
# median and the spread (min-max) over the rounds.


approaches = {
    "naive (onnx)": naive_onnx,
    "naive (onnx-light)": naive_onnx_light,
    "shared (onnx-light)": shared,
}
rounds = measure_rounds(
    approaches,
    warm_files=[os.path.join(folder, f) for f in first_files],
    before=lambda _name: empty_folder(folder, keep=first_files),
)
empty_folder(folder, keep=first_files)
written = {name: fn() for name, fn in approaches.items()}  # once more, to keep the files
table = pandas.DataFrame(rounds.summary()).set_index("operation")
table["written MiB"] = [
    mib_on_disk(*(os.path.join(folder, f) for f in written[name])) for name in table.index
]
table["files"] = [", ".join(written[name]) for name in table.index]
table.round(3)

# %%
# In words, from the gallery report (measured once, with more rounds), each
# followed by where this build's ratio falls. The two naive saves do the
# same work (read every weight, write every weight); which one is faster
# depends on the machine and the filesystem, and is said only when it holds
# beyond the report's spread. What the shared save is for does not depend on
# the machine, and is asserted: it writes a fraction of the bytes and holds
# no weight in memory.

print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
print(rounds.compare("naive (onnx-light)", "naive (onnx)").sentence())
print(rounds.compare("shared (onnx-light)", "naive (onnx-light)").sentence())
shared_mib, naive_mib = (
    table.loc["shared (onnx-light)", "written MiB"],
    table.loc["naive (onnx-light)", "written MiB"],
)
print(f"the shared save wrote {shared_mib:.1f} MiB instead of {naive_mib:.1f} MiB")
assert shared_mib < 0.5 * naive_mib
assert max(rounds.peaks("shared (onnx-light)")) < min(rounds.peaks("naive (onnx-light)"))

# %%
# Every save starts from an empty folder (only the first model's files
# kept): onnx appends to a weights file that is already there, so a
# leftover would double what it writes. Each naive save then writes every
# weight once; the shared save writes the three new ones only.


def bytes_of_tensors(model_file: str, data_file: str) -> int:
    """The bytes of the tensors ``model_file`` reads from ``data_file``."""
    places = tensor_places(os.path.join(folder, model_file))
    return int(places[places.location == data_file].length.sum())


weights = weights_nbytes(N_WEIGHTS, DIM)
naive_data = os.path.getsize(os.path.join(folder, "naive_onnx.onnx.data"))
light_data = os.path.getsize(os.path.join(folder, "naive_light.onnx.data"))
assert naive_data == bytes_of_tensors(*written["naive (onnx)"]) == weights, naive_data
assert bytes_of_tensors(*written["naive (onnx-light)"]) == weights
assert light_data - weights < 2 * N_WEIGHTS * opts.alignment  # its alignment padding only
new_bytes = sum(w.nbytes for w in new_weights.values())
assert bytes_of_tensors(*written["shared (onnx-light)"]) == new_bytes
print(
    f"weights {weights / MiB:.2f} MiB: onnx wrote {naive_data / MiB:.2f} MiB, onnx-light "
    f"{light_data / MiB:.2f} MiB (aligned), the shared save {new_bytes / MiB:.2f} MiB"
)

# %%
# What the shared variant points at
# ---------------------------------
#
# The unchanged weights still point at ``first.onnx.data``; the three new
# ones went to ``variant.onnx.data``, aligned. Nothing else was written.

places = tensor_places(os.path.join(folder, "variant.onnx"))
print(places.groupby("location").agg(tensors=("name", "count"), bytes=("length", "sum")))
places[places.name.str.startswith("W")].set_index("name").head(6)

# %%
# The first model's files were not touched:

assert file_digests(folder, first_files) == first_files
assert set(places[places.name.isin(NEW)].location) == {"variant.onnx.data"}
print("first.onnx and first.onnx.data unchanged")

# %%
# onnx and onnxruntime load the variant
# -------------------------------------
#
# :func:`onnx.load` follows both locations; the checker accepts the model;
# onnxruntime computes the same outputs as on the naive copy, and both
# match a numpy evaluation of the Gemm chain with the new weights.

full = onnx.load(os.path.join(folder, "variant.onnx"))
onnx.checker.check_model(os.path.join(folder, "variant.onnx"))
weights = {t.name: onnx.numpy_helper.to_array(t) for t in full.graph.initializer}
for name in NEW:
    np.testing.assert_array_equal(weights[name], new_weights[name])

feeds = model_inputs(DIM)
expected = feeds["X"]
for i in range(N_WEIGHTS):
    expected = expected @ weights[f"W{i}"] + weights[f"B{i}"]


def run(path: str) -> np.ndarray:
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


got_shared = run(os.path.join(folder, "variant.onnx"))
got_naive = run(os.path.join(folder, "naive_onnx.onnx"))
np.testing.assert_allclose(got_shared, got_naive, rtol=1e-6, atol=1e-6)
np.testing.assert_allclose(got_shared, expected, rtol=1e-3, atol=1e-4)
print(f"outputs {got_shared.shape}: shared == naive, and match numpy")
print(f"max |shared - numpy| = {np.abs(got_shared - expected).max():.2e}")

# %%
# The result in one picture: the bytes each way writes.

# sphinx_gallery_thumbnail_number = 1
colors = {  # each tool its colour; the shared save is onnx-light's, the naive one lighter
    "naive (onnx)": tool_color("onnx"),
    "naive (onnx-light)": tool_color("onnx-light", 1),
    "shared (onnx-light)": tool_color("onnx-light"),
}
summary_bars(
    list(table.index),
    list(table["written MiB"]),
    "MiB",
    "bytes written to save the variant",
    colors=[colors[n] for n in table.index],
)
plt.show()

# %%
# The picture
# -----------
#
# The shared save writes three weights instead of all of them and never
# holds the unchanged ones in memory.

names = list(table.index)
colors = [colors[n] for n in names]
fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
median_bars(axes[0], {n: rounds.seconds(n) for n in names}, "s", "wall time", colors)
written_mib = {n: [table.loc[n, "written MiB"]] for n in names}
median_bars(axes[1], written_mib, "MiB", "bytes written on disk", colors)
median_bars(axes[2], {n: rounds.peaks(n) for n in names}, "MiB", "peak RSS growth", colors)
total = weights_nbytes(N_WEIGHTS, DIM) / MiB
for ax in axes[1:]:
    ax.axhline(total, color="black", ls="--", lw=1, label="all weights")
legend_beside(axes[2])
fig.suptitle(f"Save a variant with {len(NEW)} new weights out of {N_WEIGHTS} ({total:.0f} MiB)")
fig.tight_layout()

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# The recipe and its rules are in
# :ref:`l-howto-save-model-with-shared-external-data`.

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-align-external-data-streaming`
# * :ref:`l-example-plot-load-save-time`
