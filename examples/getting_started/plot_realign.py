"""
.. _l-example-plot-realign:

Re-align a model's weights to 4096 bytes
========================================

An exporter writes the weights back to back, so most tensors start anywhere
in the weights file; a runtime that memory-maps the file wants each tensor to
start on a page (a multiple of 4096 bytes).
:func:`onnx_light.onnx.align_external_data_streaming` rewrites the weights
file with aligned offsets, copying the bytes file to file: no weight is loaded
in memory. Shards, in place and more: :ref:`l-howto-align-external-data-streaming`.
"""

# %%
# A model as an exporter saves it
# -------------------------------
#
# Four float32 weights of 500 x 500 (a million bytes each), saved by
# :func:`onnx.save` with external data: ``model.onnx`` and ``model.onnx.data``.

import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import ExternalDataInfo

import onnx_light.onnx as onnxl

rng = np.random.default_rng(0)
weights = [rng.standard_normal((500, 500), dtype=np.float32) for _ in range(4)]
nodes = [helper.make_node("MatMul", [f"X{i}", f"W{i}"], [f"X{i + 1}"]) for i in range(4)]
x = helper.make_tensor_value_info("X0", TensorProto.FLOAT, [1, 500])
y = helper.make_tensor_value_info("X4", TensorProto.FLOAT, [1, 500])
inits = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], inits))
folder = Path(tempfile.mkdtemp())  # in real use, the model's own folder
onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="model.onnx.data")


def offsets(path: Path) -> list[int]:
    """Where each weight starts in its file: the ``.onnx`` alone says it."""
    initializers = onnx.load(path, load_external_data=False).graph.initializer
    return [ExternalDataInfo(t).offset for t in initializers]


print("offsets before:", offsets(folder / "model.onnx"))

# %%
# Re-align
# --------

result = onnxl.align_external_data_streaming(
    folder / "model.onnx", folder / "aligned.onnx", "aligned.onnx.data", alignment=4096
)
print(f"{result.moved} tensors moved, {int(result)} bytes written to aligned.onnx.data")
print("offsets after: ", offsets(folder / "aligned.onnx"))
assert all(offset % 4096 == 0 for offset in offsets(folder / "aligned.onnx"))

# %%
# onnx reads the same weights back from the new file:

for w, tensor in zip(weights, onnx.load(folder / "aligned.onnx").graph.initializer, strict=True):
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), w)
print("onnx.load: the same weights after re-aligning")
shutil.rmtree(folder)

# %%
# The command line does the same:
#
# .. code-block:: bash
#
#    onnx-light align model.onnx aligned.onnx --alignment 4096
