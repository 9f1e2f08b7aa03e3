"""
.. _l-example-plot-hf-cache:

Work with a model in a Hugging Face cache
=========================================

``huggingface_hub`` keeps each downloaded file once, in the repository's
``blobs/`` folder, named by its hash; a revision is a folder
``snapshots/<revision>/`` of symbolic links into ``blobs/``. An ONNX model
with external data then looks like::

    models--org--tiny/
        blobs/
            4f5e...   the bytes of model.onnx
            a1b2...   the bytes of model.onnx_data
        snapshots/0123abcd/onnx/
            model.onnx      -> ../../../blobs/4f5e...
            model.onnx_data -> ../../../blobs/a1b2...

onnx-light reads such a model where it is: a data file may lie in the
folder of the model file's real path, onnxruntime's rule (see
:ref:`l-security-hf-cache`). It never writes into the cache: other
snapshots share its blobs. The recipe is to re-align the model out of the
cache, into a folder of your own, as plain files
(:ref:`l-howto-align-external-data-streaming`).

The example builds a small cache by hand, inspects and loads the model in
it, re-aligns it out with the Python API and with the command line, and
checks that the cache was not modified.
"""

# %%
# A cache snapshot, built by hand
# -------------------------------
#
# With ``huggingface_hub``, ``snapshot_download("org/tiny")`` returns the
# snapshot folder; here the same layout is built from a model saved by
# :func:`onnx.save`: both files moved into ``blobs/`` under their sha256,
# linked from the snapshot.

import os
import shutil
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnxruntime

import onnx_light.onnx as onnxl
from onnx_light.bench import (
    file_digests,
    make_gemm_model,
    model_inputs,
    other_color,
    show_command,
    sized,
    tool_color,
)

N_WEIGHTS, DIM = sized((12, 1000), quick=(4, 300))

folder = tempfile.mkdtemp(prefix="onnx-light-hf-")
export = os.path.join(folder, "export")
os.mkdir(export)
onnx.save(
    make_gemm_model(N_WEIGHTS, DIM, lead_table=2000),
    os.path.join(export, "model.onnx"),
    save_as_external_data=True,
    location="model.onnx_data",
)

repo = os.path.join(folder, "models--org--tiny")
blobs = os.path.join(repo, "blobs")
snapshot = os.path.join(repo, "snapshots", "0123abcd", "onnx")
os.makedirs(blobs)
os.makedirs(snapshot)
for name, digest in file_digests(export).items():  # {file name: its sha256}
    os.replace(os.path.join(export, name), os.path.join(blobs, digest))
    os.symlink(os.path.relpath(os.path.join(blobs, digest), snapshot), os.path.join(snapshot, name))
os.rmdir(export)

for name in sorted(os.listdir(snapshot)):
    print(f"{name:16} -> {os.readlink(os.path.join(snapshot, name))[:32]}...")

cache_before = file_digests(blobs)
model_path = os.path.join(snapshot, "model.onnx")

# %%
# Inspect and verify it in place
# ------------------------------
#
# ``onnx-light info`` and ``onnx-light verify`` take the snapshot's path:
# they follow the links and read nothing but the metadata. ``verify`` also
# says which loaders will take the snapshot as it is: onnxruntime follows the
# links into ``blobs/``, onnx (>= 1.21) refuses a weights file that is a
# symbolic link, onnx-ir one that resolves outside the model's folder; and it
# prints the command that writes a copy all three accept.
# :func:`onnx_light.bench.show_command` runs ``onnx-light`` in the example's
# folder and prints what it says.

snap_rel = os.path.relpath(model_path, folder)
show_command("verify", snap_rel, cwd=folder)
show_command("info", snap_rel, cwd=folder)

# %%
# Load it
# -------
#
# :func:`onnx_light.onnx.load` reads the model from the cache, as
# onnxruntime does. :func:`onnx.load` refuses a weights file that is a
# symbolic link (onnx 1.23): to use it, copy the files out first, which is
# what the re-align below does, aligned on the way.

model = onnxl.load(model_path)
print(f"onnx_light.onnx.load: {len(model.graph.initializer)} initializers loaded")
try:
    onnx.load(model_path)
    print("onnx.load: loaded")
except Exception as e:  # onnx.checker.ValidationError with onnx 1.23
    print(f"onnx.load: {type(e).__name__}: {str(e).replace(folder + os.sep, '')}")

# %%
# Re-align it out of the cache
# ----------------------------
#
# The destination is a folder of your own; the new model and its weights
# are plain files there. With the Python API:

mine = os.path.join(folder, "mine")
os.mkdir(mine)
result = onnxl.align_external_data_streaming(
    model_path, os.path.join(mine, "model.onnx"), "model.onnx.data", alignment=4096
)
print(f"{int(result)} bytes written, {result.moved} tensors moved")

# %%
# And with the command line, into a second folder:

os.mkdir(os.path.join(folder, "mine_cli"))
show_command("align", snap_rel, "mine_cli/model.onnx", cwd=folder)
for sub in ("mine", "mine_cli"):
    for name in sorted(os.listdir(os.path.join(folder, sub))):
        path = os.path.join(folder, sub, name)
        assert not os.path.islink(path)
        print(f"{sub}/{name}: {os.path.getsize(path)} bytes, a plain file")

# %%
# Re-aligning *inside* the snapshot is refused, before anything is
# written: its files are links into ``blobs/``, which other snapshots
# share. (onnx-light refuses the same for a variant saved next to them:
# its references would read ``blobs/`` through a link.)

try:
    onnxl.align_external_data_streaming(model_path, model_path)
except onnxl.ExternalDataError as e:
    print("refused:", str(e).replace(folder + os.sep, ""))
else:
    raise AssertionError("re-aligning inside the cache should be refused")

# %%
# The cache is untouched
# ----------------------
#
# Every blob has the same content as before, and onnxruntime computes the
# same outputs from the cache and from the re-aligned copies.

assert file_digests(blobs) == cache_before
print(f"{len(cache_before)} blobs, same sha256 as before")


def run(path: str) -> np.ndarray:
    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3  # no warning about the unused table
    sess = onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(None, model_inputs(DIM))[0]


expected = run(model_path)
for sub in ("mine", "mine_cli"):
    np.testing.assert_array_equal(run(os.path.join(folder, sub, "model.onnx")), expected)
print(f"onnxruntime: outputs {expected.shape} identical (cache, mine, mine_cli)")

# %%
# The picture
# -----------
#
# Where the bytes are: the snapshot holds links, the blobs hold the bytes
# and stay as they were, the re-aligned copy is plain files of your own.


def size(path: str) -> str:
    n = os.path.getsize(path)
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1024:,.0f} KiB"


names = ("model.onnx", "model.onnx_data")
columns = [
    ("snapshots/0123abcd/onnx/\n(symbolic links)", other_color(0, 1)),
    ("blobs/\n(bytes, unchanged)", other_color(1, 1)),
    ("mine/\n(plain files, aligned)", tool_color("onnx-light", 1)),  # what onnx-light wrote
]
blob_names = [os.path.basename(os.path.realpath(os.path.join(snapshot, n))) for n in names]
entries = [
    [f"{n}\n-> blobs/{b[:8]}..." for n, b in zip(names, blob_names, strict=True)],
    [f"{b[:8]}...\n{size(os.path.join(blobs, b))}" for b in blob_names],
    [f"{n}\n{size(os.path.join(mine, n))}" for n in ("model.onnx", "model.onnx.data")],
]
fig, ax = plt.subplots(figsize=(10, 4.6))
xs = [0.14, 0.5, 0.86]
ys = [0.62, 0.25]
for x, (title, color), texts in zip(xs, columns, entries, strict=True):
    ax.text(x, 0.93, title, ha="center", va="center", fontsize=14, weight="bold")
    for y, text in zip(ys, texts, strict=True):
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=14,
            bbox=dict(boxstyle="round,pad=0.6", facecolor=color, edgecolor="gray"),
        )
for y in ys:
    ax.annotate("", (xs[1] - 0.12, y), (xs[0] + 0.13, y), arrowprops=dict(arrowstyle="->", ls="--"))
    ax.annotate("", (xs[2] - 0.12, y), (xs[1] + 0.1, y), arrowprops=dict(arrowstyle="->", lw=2))
ax.text(0.325, 0.45, "points to", ha="center", fontsize=13, style="italic")
ax.text(0.675, 0.42, "copied by\nonnx-light align", ha="center", fontsize=13, style="italic")
ax.set_xlim(0, 1)
ax.set_ylim(0.05, 1)
ax.axis("off")
ax.set_title("Out of a Hugging Face cache: read the links, write your own files", fontsize=14)
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
# * :ref:`l-example-plot-realign`: what re-aligning changes, offset by offset.
# * :ref:`l-example-plot-inspect-verify`: ``info`` and ``verify``, on a
#   broken model too.
