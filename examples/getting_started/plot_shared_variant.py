"""
.. _l-example-plot-shared-variant:

Save a variant that shares the first model's weights
====================================================

A fine-tuned layer, a swapped head: a variant differs from a first model
in a few weights. :func:`onnx_light.onnx.save_model_with_shared_external_data`
saves it next to the first model and writes only the new weights: every
unchanged tensor keeps pointing at the first model's weights file, whose
bytes are neither read nor written.

This example loads a model without its weights, replaces one initializer,
saves the variant beside the first model, and compares it with a full
copy: bytes on disk, where each tensor is read from (``onnx-light info``),
``onnx-light verify``, and onnxruntime's outputs. The rules (where the
variant must live, what protects the shared file) are in
:ref:`l-howto-save-model-with-shared-external-data`; time and memory
against onnx are in :ref:`l-example-plot-save-model-with-shared-external-data`.
"""

# %%
# The first model
# ---------------

import os
import shutil
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import onnxruntime
import pandas

import onnx_light.onnx as onnxl
from onnx_light.bench import (
    file_digests,
    make_gemm_model,
    model_inputs,
    other_color,
    show_command,
    sized,
    tensor_places,
)

N_WEIGHTS, DIM = sized((16, 1024), quick=(8, 256))
NEW = "W0"  # the initializer the variant replaces
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-variant-")
first = os.path.join(folder, "first.onnx")
opts = onnxl.SerializeOptions(alignment=4096)
onnxl.save(make_gemm_model(N_WEIGHTS, DIM), first, location="first.onnx.data", options=opts)
first_files = file_digests(folder)  # their sha256, to check later that nothing changed them
print(f"first.onnx.data: {os.path.getsize(first + '.data') / MiB:.2f} MiB")

# %%
# Load without the weights, replace one initializer
# -------------------------------------------------
#
# ``load_external_data=False`` reads the ``.onnx`` only: every weight stays
# a reference into ``first.onnx.data``. The new ``W0`` is an ordinary
# tensor with its values inline.

variant = onnxl.load(first, load_external_data=False)
rng = np.random.default_rng(7)
new_w0 = (rng.standard_normal((DIM, DIM), dtype=np.float32) / np.float32(np.sqrt(DIM))).astype(
    np.float32
)
for init in variant.graph.initializer:
    if init.name == NEW:
        init.CopyFrom(onnxl.numpy_helper.from_array(new_w0, NEW))

# %%
# Save it beside the first model
# ------------------------------
#
# The variant must sit where the references it keeps resolve: in the first
# model's folder. Only ``W0`` is written, to ``variant.onnx.data``.

written = onnxl.save_model_with_shared_external_data(
    variant, os.path.join(folder, "variant.onnx"), options=opts
)
print(f"variant.onnx.data: {written} bytes (one weight of {4 * DIM * DIM} bytes)")

# %%
# A full copy, for comparison
# ---------------------------
#
# The usual way: load every weight, replace, save everything again.

copy = onnxl.load(first)
for init in copy.graph.initializer:
    if init.name == NEW:
        init.CopyFrom(onnxl.numpy_helper.from_array(new_w0, NEW))
onnxl.save(copy, os.path.join(folder, "copy.onnx"), location="copy.onnx.data", options=opts)
del copy

# %%
# Bytes on disk
# -------------

sizes = pandas.DataFrame(
    [
        dict(
            model=name,
            onnx_bytes=os.path.getsize(os.path.join(folder, f"{name}.onnx")),
            data_bytes=os.path.getsize(os.path.join(folder, f"{name}.onnx.data")),
        )
        for name in ("first", "variant", "copy")
    ]
).set_index("model")
sizes["total_MiB"] = (sizes.onnx_bytes + sizes.data_bytes) / MiB
print(sizes.to_string(float_format="{:.3f}".format))
assert sizes.loc["variant", "total_MiB"] < 0.5 * sizes.loc["copy", "total_MiB"]

# %%
# The command line: where each tensor is read from
# ------------------------------------------------
#
# ``onnx-light info`` lists the variant's references: ``W0`` in
# ``variant.onnx.data``, every other weight in ``first.onnx.data``.
# ``onnx-light verify`` checks them all (:func:`onnx_light.bench.show_command`
# runs the command in the example's folder and prints what it says).

show_command("info", "variant.onnx", lines=6, cwd=folder)
show_command("verify", "variant.onnx", cwd=folder)

# %%
# Outputs
# -------
#
# onnxruntime runs the three models. The variant and the full copy compute
# the same outputs; both differ from the first model's (``W0`` changed).
# The first model's files were not touched.


def run(path: str) -> np.ndarray:
    sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, model_inputs(DIM))[0]


outputs = {name: run(os.path.join(folder, f"{name}.onnx")) for name in sizes.index}
np.testing.assert_array_equal(outputs["variant"], outputs["copy"])
gap = np.abs(outputs["variant"] - outputs["first"]).max()
assert gap > 0
print(f"variant == copy; max |variant - first| = {gap:.3g}")
assert file_digests(folder, first_files) == first_files
print("first.onnx and first.onnx.data unchanged")

# %%
# The picture
# -----------
#
# Each model's weights, one bar each, coloured by the file they are read
# from: the variant reads all but one weight from ``first.onnx.data``, and
# adds one small file; the copy duplicates everything
# (:func:`onnx_light.bench.tensor_places` lists each external tensor's file).

colors = {  # files, not tools: colours no tool has
    "first.onnx.data": other_color(0),
    "variant.onnx.data": other_color(3),
    "copy.onnx.data": other_color(1),
}
names = {"first": "first", "variant": "variant", "copy": "full copy"}
fig, ax = plt.subplots(figsize=(8, 3.8))
for y, name in enumerate(names):
    left = 0.0
    places = tensor_places(os.path.join(folder, f"{name}.onnx"))
    for location, length in places.groupby("location", sort=False).length.sum().items():
        ax.barh(y, length / MiB, left=left, color=colors.get(location, "lightgray"), ec="white")
        left += length / MiB
    ax.text(
        left * 1.02,
        y,
        f"{sizes.loc[name, 'data_bytes'] / MiB:.2f} MiB\nwritten",
        va="center",
        fontsize=11,
    )
for location, color in colors.items():
    ax.barh(0, 0, color=color, label=location)
ax.set_yticks(range(len(names)), list(names.values()), fontsize=11)
ax.invert_yaxis()
ax.set_xlim(0, 1.25 * left)
ax.set_xlabel("the model's weights, by the file they are read from (MiB)")
ax.set_title(f"A variant with 1 new weight out of {N_WEIGHTS} shares the rest")
fig.legend(loc="lower center", ncols=3, fontsize=10, frameon=False)
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-save-model-with-shared-external-data`: time, bytes
#   written and peak memory against onnx.
# * :ref:`l-example-plot-shards`: shard the first model's weights.
