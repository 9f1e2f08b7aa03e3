"""
.. _l-example-plot-inspect-verify:

Inspect a model's weights and verify its references
===================================================

A model with external data is two files or more: the ``.onnx`` holds the graph
and, for each big tensor, a reference (file, offset, length) into a weights
file. ``onnx-light info`` lists those references and how they are aligned;
``onnx-light verify`` checks that each one resolves and fits in its file,
reading no weight. This page runs both from Python as ``python -m onnx_light``
to show what they print (every option: :ref:`l-cli`).
"""

# %%
# A model with external data
# --------------------------

import os
import shutil
import subprocess
import sys
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
folder = Path(tempfile.mkdtemp())  # in real use, the model's own folder
onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="model.onnx.data")


def onnx_light(*args: str) -> int:
    """Run ``onnx-light ARGS`` in the model's folder, print what it says, return its exit code."""
    command = [sys.executable, "-m", "onnx_light", *args]
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    print(f"$ onnx-light {' '.join(args)}\n{proc.stdout}{proc.stderr}")
    return proc.returncode


# %%
# Where each tensor's bytes live; every reference valid
# -----------------------------------------------------

assert onnx_light("info", "model.onnx") == 0
assert onnx_light("verify", "model.onnx") == 0

# %%
# A weights file cut short
# ------------------------
#
# What an interrupted download leaves: ``verify`` names each tensor that no longer
# fits, and exits with 1; :func:`onnx_light.onnx.load` makes the same check first.

os.truncate(folder / "model.onnx.data", 2_500_000)
assert onnx_light("verify", "model.onnx") == 1
try:
    onnxl.load(folder / "model.onnx")
except onnxl.ExternalDataError as error:
    print("onnx_light.onnx.load:", error)
shutil.rmtree(folder)

# %%
# In a shell, or a script (``--json`` prints one JSON document instead):
#
# .. code-block:: bash
#
#    onnx-light info model.onnx
#    onnx-light verify model.onnx || echo "a reference is broken"
#    onnx-light verify --json model.onnx
