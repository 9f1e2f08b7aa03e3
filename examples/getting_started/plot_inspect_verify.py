"""
.. _l-example-plot-inspect-verify:

Inspect a model's weights and verify its references
===================================================

A model with external data is two files or more: the ``.onnx`` holds the graph
and, for each big tensor, a reference (file, offset, length) into a weights
file. :func:`onnx_light.onnx.inspect_model` lists those references and how they
are aligned; :func:`onnx_light.onnx.verify_model` checks that each one resolves
and fits in its file, and which of onnx, onnxruntime and onnx-ir load the model,
reading no weight. ``onnx-light info`` and ``verify`` print these objects.
"""

# %%
# A model with external data
# --------------------------

import os
import shutil
import tempfile

import matplotlib.pyplot as plt
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
folder = tempfile.mkdtemp()  # in real use, the model's own folder
path = os.path.join(folder, "model.onnx")
onnx.save(model, path, save_as_external_data=True, location="model.onnx.data")

# %%
# Where each tensor's bytes live; every reference valid
# -----------------------------------------------------

info = onnxl.inspect_model(path)
for t in info.tensors:
    print(f"{t.name} {t.dtype} {list(t.shape)}: {t.location} at {t.offset}, {t.length} bytes")
print("aligned to 4096:", info.aligned_to(4096), "- on disk:", info.files[0].file_size)
check = onnxl.verify_model(path)
for v in check.loaders:
    print(v.rule, "accepts" if v.accepts else "refuses: " + "; ".join(v.reasons))
assert check.valid and check.loadable and check.external_tensors == 4

# %%
# A weights file cut short
# ------------------------
#
# What an interrupted download leaves: ``verify_model`` names each tensor that no
# longer fits (:func:`onnx_light.onnx.load` refuses the model with the same message).

cut = 2_500_000
os.truncate(os.path.join(folder, "model.onnx.data"), cut)
check = onnxl.verify_model(path)
print("\n".join(check.problems))
assert not check.valid and len(check.problems) == 2
shutil.rmtree(folder)

# %%
# Each tensor's range in the weights file, against what is left of it:

for i, t in enumerate(info.tensors):
    refused = t.offset + t.length > cut
    plt.barh(i, t.length / 1e6, left=t.offset / 1e6, hatch="//" if refused else None)
plt.axvline(cut / 1e6, color="black", linestyle="--")
plt.yticks(range(len(info.tensors)), [t.name for t in info.tensors])
plt.xlabel("MB of model.onnx.data (dashed: where it now ends; hatched: refused)")

# %%
# In a shell: ``onnx-light info model.onnx``, ``onnx-light verify model.onnx`` (exit
# code 1 when a reference is broken; ``--json``: these objects as JSON; :ref:`l-cli`).
