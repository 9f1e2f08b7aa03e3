"""
.. _l-example-plot-inspect-verify:

Inspect a model's weights and verify its references
===================================================

A model with external data is two files or more: the ``.onnx`` holds the
graph and, for each big tensor, a reference (a file name, an offset, a
length) into a weights file. ``onnx-light info`` lists those references
and how they are aligned; ``onnx-light verify`` checks that each one
resolves and fits in its file. Neither reads a weight.

This example inspects a good model, as a table and as JSON, then breaks a
copy of it (its weights file cut short, as by an interrupted download) and
shows what ``verify`` and :func:`onnx_light.onnx.load` say: the tensor, the
file, and the bytes that are missing. See :ref:`l-cli` for every option.
"""

# %%
# A model with external data
# --------------------------

import json
import os
import shutil
import tempfile

import matplotlib.pyplot as plt
import onnx
import pandas

import onnx_light.onnx as onnxl
from onnx_light.bench import make_gemm_model, show_command, sized
from onnx_light.bench.figures import STATE_COLORS

N_WEIGHTS, DIM = sized((8, 1024), quick=(4, 256))

folder = tempfile.mkdtemp(prefix="onnx-light-inspect-")
good = os.path.join(folder, "good")
os.mkdir(good)
onnx.save(
    make_gemm_model(N_WEIGHTS, DIM),
    os.path.join(good, "model.onnx"),
    save_as_external_data=True,
    location="model.onnx.data",
)


# %%
# ``onnx-light info``: where every tensor's bytes live
# ----------------------------------------------------
#
# One row per tensor (data type, shape, file, offset, length, and
# ``offset 2^k``: the largest power of two dividing the offset), the
# totals per file, and whether every offset is a multiple of 4096 and of
# 65536. onnx writes the tensors back to back: this model is not aligned
# (:ref:`l-example-plot-realign` fixes that).
# :func:`onnx_light.bench.show_command` runs ``onnx-light`` in the example's
# folder and prints what it says, paths relative to that folder.

show_command("info", "good/model.onnx", cwd=folder)

# %%
# ``--json`` prints the same as one JSON document, for scripts (on a
# failure too: ``{"error": ..., "model": ...}``).

info = json.loads(show_command("info", "good/model.onnx", "--json", lines=16, cwd=folder))
print(sorted(info))
print(info["files"])

# %%
# Its tensors, as a table:

tensors = pandas.DataFrame(info["tensors"]).set_index("name")
tensors[["dtype", "shape", "location", "offset", "length"]].head(4)

# %%
# ``onnx-light verify``: every reference resolves and fits
# --------------------------------------------------------
#
# For each external tensor: its file exists and stays inside the model's
# folder, its byte range fits in the file, and its length matches its data
# type and shape.

show_command("verify", "good/model.onnx", cwd=folder)

# %%
# A broken copy: the weights file cut short
# -----------------------------------------
#
# The copy's ``model.onnx.data`` loses its last 40%, what an interrupted
# download or a full disk leaves behind. ``info`` still lists the
# references (it reads no weight) and shows the file shorter than the
# bytes it should hold; ``verify`` names each tensor that no longer fits,
# the file, and the range that is missing, and exits with 1.

broken = os.path.join(folder, "broken")
shutil.copytree(good, broken)
data = os.path.join(broken, "model.onnx.data")
full_size = os.path.getsize(data)
cut = int(full_size * 0.6)
os.truncate(data, cut)
print(f"model.onnx.data: {full_size} bytes, cut to {cut}")

show_command("verify", "broken/model.onnx", expect=1, cwd=folder)

# %%
# The same check runs before :func:`onnx_light.onnx.load` reads any weight:
# it raises :class:`onnx_light.onnx.ExternalDataError` with the same
# message (the first problem found).

try:
    onnxl.load(os.path.join(broken, "model.onnx"))
except onnxl.ExternalDataError as e:
    print(type(e).__name__, str(e).replace(folder + os.sep, ""), sep=": ")
else:
    raise AssertionError("a truncated weights file should not load")

# %%
# A script finds the same from ``info --json``: a tensor whose
# ``offset + length`` is past its file's ``file_size``.

broken_info = json.loads(show_command("info", "broken/model.onnx", "--json", lines=4, cwd=folder))
sizes = {f["location"]: f["file_size"] for f in broken_info["files"]}
cut_off = [
    t["name"] for t in broken_info["tensors"] if t["offset"] + t["length"] > sizes[t["location"]]
]
print(f"file sizes: {sizes}")
print(f"tensors past the end: {cut_off}")
assert cut_off

# %%
# The picture
# -----------
#
# Each tensor's byte range in ``model.onnx.data``, from the JSON above,
# against the end of the truncated file: the tensors that ``verify``
# reported are the ones that cross it.

MiB = 2**20
fig, ax = plt.subplots(figsize=(8, 4.2))
rows = broken_info["tensors"][::-1]  # the first tensor on top
for y, t in enumerate(rows):
    lost = t["name"] in cut_off
    ax.broken_barh(
        [(t["offset"] / MiB, t["length"] / MiB)],
        (y - 0.4, 0.8),
        color=STATE_COLORS["bad" if lost else "good"],
    )
ax.axvline(cut / MiB, color="black", ls="--", lw=1.5)
ax.text(cut / MiB, len(rows) - 0.5, " the file ends here", va="center", fontsize=10)
ax.set_yticks(range(len(rows)), [t["name"] for t in rows])
ax.set_ylim(-0.7, len(rows) + 0.3)
ax.set_xlabel("position in model.onnx.data (MiB)")
ax.set_ylabel("tensor")
ax.set_title("Truncated weights: tensors complete (green), cut off (red)")
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
# * :ref:`l-example-plot-realign`: align the offsets ``info`` shows.
# * :ref:`l-example-plot-hf-cache`: inspect a model inside a Hugging Face
#   cache.
