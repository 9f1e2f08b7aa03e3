"""
.. _l-example-plot-edit-without-loading:

Edit a model without loading its weights
========================================

onnx's graph tools (shape inference, the checker, the Extractor,
:mod:`onnx.compose`) only read and change the graph: run them on a model loaded
with ``load_external_data=False`` and no weight enters memory.
:func:`onnx_light.onnx.save_edited` then writes the result **beside the source,
sharing its weights**, or as a **compact copy** holding only the bytes the
edited model still reads, copied file to file. Numbers for a model of more
than 2 GiB: :ref:`l-howto-edit-without-loading`.
"""

# %%
# A model with its weights in a second file
# -----------------------------------------

import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

rng = np.random.default_rng(0)
weights = [rng.standard_normal((500, 500), dtype=np.float32) for _ in range(8)]
nodes = [helper.make_node("MatMul", [f"X{i}", f"W{i}"], [f"X{i + 1}"]) for i in range(8)]
x = helper.make_tensor_value_info("X0", TensorProto.FLOAT, [1, 500])
y = helper.make_tensor_value_info("X8", TensorProto.FLOAT, [1, 500])
inits = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
graph = helper.make_graph(nodes, "chain", [x], [y], inits)
# opset 18 at the IR version onnx pairs with it (8): older onnxruntimes read it too
model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 18)])
folder = Path(tempfile.mkdtemp())  # in real use, the model's own folder
onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="model.onnx.data")

# %%
# Load the graph only, keep its first half, write it both ways
# ------------------------------------------------------------

graph_only = onnxl.load(folder / "model.onnx", load_external_data=False)
inferred = onnx.shape_inference.infer_shapes(graph_only)  # the Extractor needs the shapes
half = onnx.utils.Extractor(inferred).extract_model(["X0"], ["X4"])
onnxl.save_edited(half, folder / "model.onnx", folder / "half.onnx", share_weights=True)
(folder / "compact").mkdir()
onnxl.save_edited(half, folder / "model.onnx", folder / "compact" / "half.onnx")
for path in sorted(folder.rglob("*")):
    if path.is_file():
        print(f"{str(path.relative_to(folder)):24} {path.stat().st_size:>10,} bytes")

# %%
# onnxruntime runs both: the same outputs, those of the first four weights
# -------------------------------------------------------------------------

feeds = {"X0": rng.standard_normal((1, 500), dtype=np.float32)}
shared, compact = (
    onnxruntime.InferenceSession(path).run(None, feeds)[0]
    for path in (folder / "half.onnx", folder / "compact" / "half.onnx")
)
np.testing.assert_array_equal(shared, compact)
expected = feeds["X0"] @ weights[0] @ weights[1] @ weights[2] @ weights[3]
np.testing.assert_allclose(shared, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
print("onnxruntime: half.onnx and compact/half.onnx compute X0 @ W0 @ W1 @ W2 @ W3")
shutil.rmtree(folder)

# %%
# There is no ``edit`` command (the tools are Python); the command line checks
# and shows the results:
#
# .. code-block:: bash
#
#    onnx-light verify half.onnx compact/half.onnx
#    onnx-light info compact/half.onnx
