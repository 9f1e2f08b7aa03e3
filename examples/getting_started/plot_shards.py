"""
.. _l-example-plot-shards:

Split the weights into shards
=============================

One weights file of many gigabytes does not suit every host or runtime: a hub
may cap the size of a file, a browser loader may fetch the weights in pieces.
``SerializeOptions.max_shard_size`` splits them into files of at most that many
bytes, each tensor whole in one file; the ``.onnx`` points each tensor at its
shard, so onnx, onnxruntime and onnx-light load the model as before. Re-sharding
a saved model: :ref:`l-howto-align-external-data-streaming`.
"""

# %%
# Save a model in shards of at most 2 MiB
# ---------------------------------------
#
# Eight float32 weights of 500 x 500, a million bytes each, held in memory.

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
folder = Path(tempfile.mkdtemp())  # in real use, your own folder

options = onnxl.SerializeOptions(alignment=4096, max_shard_size=2 * 2**20)
onnxl.save(model, folder / "model.onnx", location="model.onnx.data", options=options)
sizes = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
for name, size in sizes.items():
    print(f"{name:32} {size:>10,} bytes")

# %%
# onnx loads the model back from its shards, with the same weights:

for w, tensor in zip(weights, onnx.load(folder / "model.onnx").graph.initializer, strict=True):
    np.testing.assert_array_equal(numpy_helper.to_array(tensor), w)
print("onnx.load: the same weights from", len(sizes) - 1, "shards")

# %%
# Each shard under the limit:

shards = [size / 2**20 for name, size in sizes.items() if name.endswith(".data")]
plt.bar([f"shard {i + 1}" for i in range(len(shards))], shards)
limit = options.max_shard_size / 2**20
plt.axhline(limit, color="black", linestyle="--")
plt.ylim(0, 1.25 * limit)
plt.ylabel("MiB (the dashed line: max_shard_size)")
shutil.rmtree(folder)

# %%
# The command line re-shards a saved model; ``--shard-naming transformers.js``
# names the shards as transformers.js expects them (``model.onnx_data``,
# ``model.onnx_data_1``...):
#
# .. code-block:: bash
#
#    mkdir web
#    onnx-light align model.onnx web/model.onnx --max-shard-size 2M \
#        --shard-naming transformers.js
