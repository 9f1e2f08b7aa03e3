"""
.. _l-example-plot-dedup:

Store the weights of two exported models once
=============================================

An exporter often writes the same weights twice: optimum exports a decoder and
a decoder with past key values, each with its own weights file of the same bytes.
:func:`onnx_light.onnx.deduplicate_external_data` rewrites them to read **one
weights file where each distinct tensor is stored once**, comparing the weights
on disk without loading them. In place and more: :ref:`l-howto-deduplicate`.
"""

# %%
# An exporter's pair: the same four weights saved twice by :func:`onnx.save`
# --------------------------------------------------------------------------

import shutil
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

rng = np.random.default_rng(0)
weights = [rng.standard_normal((512, 512), dtype=np.float32) for _ in range(4)]
nodes = [helper.make_node("MatMul", [f"X{i}", f"W{i}"], [f"X{i + 1}"]) for i in range(4)]
x = helper.make_tensor_value_info("X0", TensorProto.FLOAT, [1, 512])
y = helper.make_tensor_value_info("X4", TensorProto.FLOAT, [1, 512])
inits = [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(weights)]
folder = Path(tempfile.mkdtemp())  # in real use, the export's own folder
(folder / "export").mkdir()
(folder / "shared").mkdir()
names = ["decoder_model", "decoder_with_past_model"]
for name in names:  # a model each: onnx.save moves the weights out of the one it is given
    model = helper.make_model(helper.make_graph(nodes, "chain", [x], [y], inits))
    path = folder / "export" / f"{name}.onnx"
    onnx.save(model, path, save_as_external_data=True, location=f"{name}.onnx_data")

# %%
# One call: the sources, a destination for each, the name of the shared weights file
# ----------------------------------------------------------------------------------

result = onnxl.deduplicate_external_data(
    [folder / "export" / f"{name}.onnx" for name in names],
    [folder / "shared" / f"{name}.onnx" for name in names],
    "model.onnx_data",
)
print(f"{result.bytes_before:,} bytes of tensors -> {result.bytes_written:,} bytes written")
print(f"{len(result.groups)} tensors stored once for both models")

# %%
# Both models read the same weights as before, now from one file:

for name in names:
    loaded = onnx.load(folder / "shared" / f"{name}.onnx").graph.initializer
    for w, tensor in zip(weights, loaded, strict=True):
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), w)
print(sorted(p.name for p in (folder / "shared").iterdir()))

# %%
# The bytes on disk, before and after:

mib = [sum(p.stat().st_size for p in (folder / s).iterdir()) / 2**20 for s in ("export", "shared")]
plt.bar(["export/ (onnx.save)", "shared/ (deduplicated)"], mib)
plt.ylabel("MiB on disk")
shutil.rmtree(folder)

# %%
# The command line does the same (``--out`` must exist):
#
# .. code-block:: bash
#
#    mkdir shared && onnx-light dedup --out shared --weights model.onnx_data \
#        export/decoder_model.onnx export/decoder_with_past_model.onnx
