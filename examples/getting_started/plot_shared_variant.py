"""
.. _l-example-plot-shared-variant:

Save a variant that shares the first model's weights
====================================================

A fine-tuned layer, a swapped head: a variant differs from a first model in a
few weights. :func:`onnx_light.onnx.save_model_with_shared_external_data` saves
it beside the first model and writes only the new weights; every unchanged
tensor keeps pointing into the first model's weights file, which is neither
read nor written. Where the variant must live and what protects the shared
file: :ref:`l-howto-save-model-with-shared-external-data`.
"""

# %%
# The first model
# ---------------

import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

rng = np.random.default_rng(0)
weights = [rng.standard_normal((500, 500), dtype=np.float32) for _ in range(8)]
nodes = [helper.make_node("MatMul", [f"X{i}", f"W{i}"], [f"X{i + 1}"]) for i in range(8)]
x = helper.make_tensor_value_info("X0", TensorProto.FLOAT, [1, 500])
y = helper.make_tensor_value_info("X8", TensorProto.FLOAT, [1, 500])
inits = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], inits))
folder = Path(tempfile.mkdtemp())  # in real use, the first model's folder
options = onnxl.SerializeOptions(alignment=4096)
onnxl.save(model, folder / "first.onnx", location="first.onnx.data", options=options)

# %%
# Load it without its weights, replace ``W0``, save the variant beside it
# -----------------------------------------------------------------------

variant = onnxl.load(folder / "first.onnx", load_external_data=False)
new_w0 = rng.standard_normal((500, 500), dtype=np.float32)
variant.graph.initializer[0].CopyFrom(numpy_helper.from_array(new_w0, "W0"))
written = onnxl.save_model_with_shared_external_data(
    variant, folder / "variant.onnx", options=options
)
print(f"variant.onnx.data: {written:,} bytes written, one weight of {new_w0.nbytes:,} bytes")

# %%
# onnx loads the variant: the new ``W0``, every other weight from ``first.onnx.data``.

loaded = onnx.load(folder / "variant.onnx").graph.initializer
for w, tensor in zip([new_w0, *weights[1:]], loaded, strict=True):
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), w)
print("onnx.load: the new W0 and the first model's other weights")

# %%
# The bytes written, against saving a full copy of the model:

sizes = [written, (folder / "first.onnx.data").stat().st_size]
plt.bar(["the variant", "a full copy"], [size / 2**20 for size in sizes])
plt.ylabel("MiB of weights written")
shutil.rmtree(folder)

# %%
# There is no command for this (the edit is Python), but the command line shows
# where each tensor of the variant is read from, and checks every reference:
#
# .. code-block:: bash
#
#    onnx-light info variant.onnx
#    onnx-light verify variant.onnx
