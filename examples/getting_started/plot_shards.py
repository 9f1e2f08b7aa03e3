"""
.. _l-example-plot-shards:

Split the weights into shards
=============================

One weights file of many gigabytes does not suit every host or runtime:
a hub may cap the size of a file, a browser loader may fetch the weights
in pieces. ``max_shard_size`` splits the weights into files of at most
that many bytes, each tensor whole in one file and aligned within it; the
``.onnx`` references each tensor in its shard, so onnx, onnxruntime and
onnx-light load the model as before.

This example saves an in-memory model in shards with
:func:`onnx_light.onnx.save` (``SerializeOptions.max_shard_size``),
re-shards a saved model with ``onnx-light align --max-shard-size`` (named
for transformers.js this time), lists the shard files, and loads the model
back with :func:`onnx_light.onnx.load` and onnxruntime. Both ways are
described in :ref:`l-howto-align-external-data-streaming`.
"""

# %%
# Save a model in shards
# ----------------------
#
# Each weight of :func:`onnx_light.bench.make_gemm_model` weighs
# ``4 * DIM * DIM`` bytes; the limit leaves room for two weights and their
# biases in each shard.

import os
import shutil
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime
import pandas

import onnx_light.onnx as onnxl
from onnx_light.bench import (
    legend_beside,
    make_gemm_model,
    model_inputs,
    other_color,
    show_command,
    sized,
    tensor_places,
)

N_WEIGHTS, DIM = sized((12, 1000), quick=(6, 300))
MAX_SHARD = int(2.2 * 4 * DIM * DIM)  # bytes
KiB = 1024

folder = tempfile.mkdtemp(prefix="onnx-light-shards-")
model = make_gemm_model(N_WEIGHTS, DIM)
opts = onnxl.SerializeOptions(alignment=4096, max_shard_size=MAX_SHARD)
onnxl.save(model, os.path.join(folder, "model.onnx"), location="model.onnx.data", options=opts)
print(f"max_shard_size = {MAX_SHARD} bytes ({MAX_SHARD / KiB:,.0f} KiB)")


def listing(sub: str = "") -> pandas.DataFrame:
    """The files of a folder and their sizes."""
    path = os.path.join(folder, sub)
    names = sorted(os.listdir(path))
    sizes = [os.path.getsize(os.path.join(path, n)) for n in names]
    return pandas.DataFrame({"file": names, "bytes": sizes, "KiB": [s / KiB for s in sizes]})


files = listing()
print(files.to_string(index=False, float_format="{:,.1f}".format))
assert (files.bytes <= MAX_SHARD).all()

# %%
# The shards are named as onnx-ir names them,
# ``model-00001-of-00003.onnx.data``... Each holds whole tensors; the
# ``.onnx`` says which shard holds which tensor
# (:func:`onnx_light.bench.tensor_places` reads it, not the weights):

shards = tensor_places(os.path.join(folder, "model.onnx"))
print(shards.head(6).to_string(index=False))

# %%
# Re-shard with the command line
# ------------------------------
#
# ``onnx-light align`` re-lays out a saved model without loading it. With
# ``--shard-naming transformers.js`` the shards take the names
# transformers.js derives from ``model.onnx``: ``model.onnx_data``,
# ``model.onnx_data_1``... (:func:`onnx_light.bench.show_command` runs the
# command in the example's folder and prints what it says.)

os.mkdir(os.path.join(folder, "web"))
flags = ["--max-shard-size", str(MAX_SHARD), "--shard-naming", "transformers.js"]
show_command("align", "model.onnx", "web/model.onnx", *flags, cwd=folder)
print(listing("web").to_string(index=False, float_format="{:,.1f}".format))

# %%
# Both layouts plan the same shards: the same tensors in each, at the same
# offsets, only the names differ.

web = tensor_places(os.path.join(folder, "web", "model.onnx"))
assert (web[["name", "offset", "length"]] == shards[["name", "offset", "length"]]).all().all()
assert shards.groupby("location", sort=False)["name"].apply(list).tolist() == (
    web.groupby("location", sort=False)["name"].apply(list).tolist()
)
print(dict(zip(shards.location.unique(), web.location.unique(), strict=True)))

# %%
# Load it back
# ------------
#
# :func:`onnx_light.onnx.load` reads the shards (up to four readers, one
# per file) and returns the same weights as the original model; onnxruntime
# runs both sharded models and computes the same outputs as the model in
# memory.

original = {t.name: onnxl.numpy_helper.to_array(t) for t in model.graph.initializer}
loaded = onnxl.load(os.path.join(folder, "model.onnx"))
for t in loaded.graph.initializer:
    np.testing.assert_array_equal(onnxl.numpy_helper.to_array(t), original[t.name])
print(f"{len(original)} tensors: the same values after loading the shards")


def run(model_or_path) -> np.ndarray:
    if not isinstance(model_or_path, str):
        model_or_path = model_or_path.SerializeToString()
    sess = onnxruntime.InferenceSession(model_or_path, providers=["CPUExecutionProvider"])
    return sess.run(None, model_inputs(DIM))[0]


expected = run(model)
for name in ("model.onnx", "web/model.onnx"):
    np.testing.assert_array_equal(run(os.path.join(folder, name)), expected)
print(
    f"onnxruntime: outputs {expected.shape} identical (in memory, onnx-ir names, transformers.js)"
)

# %%
# The picture
# -----------
#
# What each shard holds: whole tensors (each weight followed by its small
# bias, and zero padding up to the next multiple of 4096 bytes), under the
# limit.

per_shard = shards.groupby("location", sort=False).agg(
    tensors=("name", "count"), tensor_bytes=("length", "sum")
)
per_shard["file_bytes"] = [os.path.getsize(os.path.join(folder, loc)) for loc in per_shard.index]
per_shard["padding_bytes"] = per_shard.file_bytes - per_shard.tensor_bytes
print(per_shard.to_string())

fig, ax = plt.subplots(figsize=(8, 4.2))
for x, (_, rows) in enumerate(shards.groupby("location", sort=False)):
    weights = rows[rows["name"].str.startswith("W")]
    for i, row in enumerate(weights.itertuples()):
        # a weight, its bias and the padding after them, up to the next weight
        following = rows[rows.offset > row.offset]
        nxt = following[following["name"].str.startswith("W")].offset.min()
        top = per_shard.file_bytes.iloc[x] if np.isnan(nxt) else nxt
        color = other_color(i, 1)  # the weights of one file: colours no tool has
        ax.bar(x, (top - row.offset) / KiB, bottom=row.offset / KiB, color=color, ec="white")
        label = f"{row.name} + B{row.name[1:]}"
        ax.text(x, (row.offset + top) / 2 / KiB, label, ha="center", va="center", fontsize=11)
ax.axhline(MAX_SHARD / KiB, color="black", ls="--", lw=1.5, label="max_shard_size")
n = len(per_shard)
ax.set_xticks(range(n), [f"shard {i + 1}" for i in range(n)])
ax.set_ylim(0, 1.25 * MAX_SHARD / KiB)
ax.set_ylabel("bytes in the shard file (KiB)")
ax.set_title(f"{N_WEIGHTS} weights in {n} shards of at most {MAX_SHARD / KiB:,.0f} KiB")
legend_beside(ax, fontsize=10)
fig.tight_layout()
plt.show()

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-realign`: one aligned file.
# * :ref:`l-example-plot-shared-variant`: a second model that reuses these
#   weights.
