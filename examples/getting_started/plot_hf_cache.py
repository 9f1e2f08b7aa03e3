"""
.. _l-example-plot-hf-cache:

Work with a model in a Hugging Face cache
=========================================

``huggingface_hub`` stores each downloaded file once, in ``blobs/`` under its
hash; a revision is a folder ``snapshots/<revision>/`` of symbolic links into
``blobs/``. onnxruntime and :func:`onnx_light.onnx.load` read a model there,
onnx (>= 1.21) refuses a weights file that is a link, and no writer should touch
the cache: other snapshots share its blobs. The recipe: re-align the model out
of the cache into a folder of your own, as plain files (:ref:`l-security-hf-cache`).
"""

# %%
# A cache snapshot, built by hand
# -------------------------------
#
# ``snapshot_download("org/tiny")`` would return the snapshot folder; here the
# same layout is built from a model saved by :func:`onnx.save`, without a download.

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

rng = np.random.default_rng(0)
weights = [rng.standard_normal((500, 500), dtype=np.float32) for _ in range(4)]
nodes = [helper.make_node("MatMul", [f"X{i}", f"W{i}"], [f"X{i + 1}"]) for i in range(4)]
x = helper.make_tensor_value_info("X0", TensorProto.FLOAT, [1, 500])
y = helper.make_tensor_value_info("X4", TensorProto.FLOAT, [1, 500])
inits = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], inits))
folder = Path(tempfile.mkdtemp())  # in real use, ~/.cache/huggingface/hub
onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="model.onnx_data")
blobs = folder / "models--org--tiny" / "blobs"
snapshot = folder / "models--org--tiny" / "snapshots" / "0123abcd" / "onnx"
blobs.mkdir(parents=True)
snapshot.mkdir(parents=True)
for name in ("model.onnx", "model.onnx_data"):
    blob = blobs / hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / name).replace(blob)
    (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    print(f"{name} -> {os.readlink(snapshot / name)}")

# %%
# Re-align it out of the cache
# ----------------------------

mine = folder / "mine"  # a folder of your own
mine.mkdir()
result = onnxl.align_external_data_streaming(snapshot / "model.onnx", mine / "model.onnx")
print(f"{result.moved} tensors copied into", sorted(p.name for p in mine.iterdir()))

# %%
# ``mine/`` holds plain files that onnx loads, with the same weights; every blob
# still has the content its name (its sha256) says.

for w, tensor in zip(weights, onnx.load(mine / "model.onnx").graph.initializer, strict=True):
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), w)
for blob in blobs.iterdir():
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name
print("onnx.load: the same weights; the cache unchanged")
shutil.rmtree(folder)

# %%
# The command line does the same:
#
# .. code-block:: bash
#
#    snapshot=~/.cache/huggingface/hub/models--org--tiny/snapshots/0123abcd/onnx
#    onnx-light verify $snapshot/model.onnx  # which loaders take it as it is
#    mkdir mine && onnx-light align $snapshot/model.onnx mine/model.onnx
