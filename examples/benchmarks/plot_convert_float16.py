"""
.. _l-example-plot-convert-float16:

Convert to float16 against the usual recipe: time, memory, same weights
=======================================================================

The usual way to convert a float32 model to float16 loads every weight,
converts the model in memory and saves it again:

.. code-block:: python

   model = onnx.load("model.onnx")  # every weight in memory
   model = onnxruntime.transformers.float16.convert_float_to_float16(model)
   onnx.save(model, "model16.onnx", save_as_external_data=True, location="model16.onnx.data")

:func:`onnx_light.onnx.convert_float_to_float16` makes the same graph and
the same weights, bit for bit, without holding a weight in memory: the graph
is converted on the model read without its weights, and each float32 tensor
is clipped and cast chunk by chunk while it is copied into the new weights
file.

This example converts a synthetic model both ways (24 float32 weights of
1024 x 1024, 96 MiB; 8 of 256 x 256 under ``UNITTEST_GOING=1``), checks that
the two outputs hold the same weights byte for byte and compute the same
outputs in onnxruntime, and measures time and peak memory.
"""

# %%
# A two-file float32 model
# ------------------------
#
# ``benchmarks.harness.make_gemm_model`` builds a chain of ``Gemm`` nodes,
# saved as ``model.onnx`` + ``model.onnx.data`` as exporters write it. The
# converter of onnxruntime is imported here, once, so that its import is not
# part of what is measured.

import os
import shutil
import tempfile
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnxruntime
import pandas
from onnx import numpy_helper
from onnxruntime.transformers import float16

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    describe_machine,
    empty_folder,
    legend_beside,
    make_gemm_model,
    measure_rounds,
    median_bars,
    model_inputs,
    quick_run,
    sized,
    summary_bars,
    tensor_places,
    tool_color,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((24, 1024), quick=(8, 256))
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-float16-")
src = os.path.join(folder, "model.onnx")
src_data = os.path.join(folder, "model.onnx.data")
onnx.save_model(
    make_gemm_model(N_WEIGHTS, DIM), src, save_as_external_data=True, location="model.onnx.data"
)
weights = weights_nbytes(N_WEIGHTS, DIM) / MiB
print(f"float32 weights: {weights:.1f} MiB in model.onnx.data")

# %%
# The two ways, and a floor
# -------------------------
#
# Each way writes ``out/NAME.onnx`` and its weights beside it. Both use the
# default settings of onnxruntime's converter (the same defaults in
# onnx-light): every float32 tensor but those of the blocked op types,
# clipped to float16's range. The floor is the least any converter must do:
# one loop that reads the weights file in 16 MiB chunks, casts them with
# numpy and writes a new file, with no graph and no clipping.

out = os.path.join(folder, "out")


def usual_recipe() -> None:
    model = float16.convert_float_to_float16(onnx.load(src))
    dst = os.path.join(out, "usual.onnx")
    onnx.save(model, dst, save_as_external_data=True, location="usual.onnx.data")


def onnx_light_convert() -> None:
    onnxl.convert_float_to_float16(src, os.path.join(out, "light.onnx"))


def numpy_floor() -> None:
    with open(src_data, "rb") as f, open(os.path.join(out, "floor.data"), "wb") as g:
        while values := f.read(16 * MiB):
            g.write(np.frombuffer(values, np.float32).astype(np.float16).tobytes())


USUAL = "onnxruntime's converter (load, convert, save)"
LIGHT = "onnx-light convert_float_to_float16"
FLOOR = "numpy loop (read, cast, write)"
ways = {USUAL: usual_recipe, LIGHT: onnx_light_convert}
if not quick_run():
    ways[FLOOR] = numpy_floor

# %%
# Measure
# -------
#
# ``benchmarks.harness.measure_rounds``, the method of every benchmark of
# this gallery: each way in a process of its own, in interleaved rounds, the
# source in the page cache, the destination emptied before each run; the
# peak memory is the kernel's (``VmHWM``), every allocation included.

rounds = measure_rounds(
    ways,
    warm_files=[src, src_data],
    before=lambda _way: empty_folder(out),
)
table = pandas.DataFrame(rounds.summary()).set_index("operation")
table.round(3)

# %%
# Same weights, same outputs
# --------------------------
#
# Once more each way, to keep both outputs: the same tensors, each of the
# same dtype and the same bytes, the same node types, and onnxruntime
# computes bit-identical outputs from both. onnx-light's weights sit at
# offsets aligned to 4096; ``onnx.save`` packs them.

empty_folder(out)
usual_recipe()
onnx_light_convert()
usual, light = os.path.join(out, "usual.onnx"), os.path.join(out, "light.onnx")


def tensor_bytes(path: str) -> dict[str, tuple[int, bytes]]:
    """Each initializer's dtype and bytes, read from the model and its weights file."""
    model = onnx.load(path)  # with its weights: small enough here, and after the measures
    return {
        t.name: (t.data_type, numpy_helper.to_array(t).tobytes()) for t in model.graph.initializer
    }


usual_bytes, light_bytes = tensor_bytes(usual), tensor_bytes(light)
assert usual_bytes == light_bytes, "the weights differ"
assert {dtype for dtype, _ in light_bytes.values()} == {onnx.TensorProto.FLOAT16}
assert (tensor_places(light).offset % 4096 == 0).all()
print(f"{len(light_bytes)} tensors: the same float16 bytes in both outputs")


def node_types(path: str) -> list[str]:
    return [node.op_type for node in onnx.load(path, load_external_data=False).graph.node]


assert node_types(usual) == node_types(light)
onnx.checker.check_model(light, full_check=True)

feeds = model_inputs(DIM, batch=4)


def run(path: str, dtype) -> np.ndarray:
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"X": feeds["X"].astype(dtype)})[0]


expected = run(src, np.float32)
got = run(light, np.float16)
np.testing.assert_array_equal(run(usual, np.float16), got)
diff = np.abs(got.astype(np.float32) - expected).max()
print(f"onnxruntime: outputs {got.shape} identical; largest difference to float32: {diff:.2g}")

# %%
# What was measured
# -----------------
#
# The rankings are the gallery report's, measured once with more rounds
# (``benchmarks.harness.Comparison.sentence``: a ranking only beyond the
# spread of its rounds, else within this machine's noise), followed by where
# this build's own ratio falls. Asserted, whatever the machine: the usual
# recipe holds every weight, onnx-light does not.

light_peak = max(rounds.peaks(LIGHT))
usual_peak = min(rounds.peaks(USUAL))
print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
print(
    f"peak memory: onnx-light at most +{light_peak:.1f} MiB, the usual recipe at least "
    f"+{usual_peak:.0f} MiB, for {weights:.0f} MiB of float32 weights"
)
print(rounds.compare(LIGHT, USUAL).sentence())
if FLOOR in ways:
    print(rounds.compare(LIGHT, FLOOR).sentence())
assert light_peak < 64, "onnx-light must not hold the weights in memory"
assert usual_peak >= weights, "the usual recipe holds every weight"

# %%
# The result in one picture: the peak memory of each way, the float32
# weights' size dashed.

short = {USUAL: "onnxruntime's converter", LIGHT: "onnx-light", FLOOR: "numpy loop (floor)"}
palette = {USUAL: tool_color("onnxruntime"), LIGHT: tool_color("onnx-light")}
palette[FLOOR] = tool_color("floor")
summary_bars(
    [short[name] for name in rounds.names],
    {short[name]: rounds.peaks(name) for name in rounds.names},
    "MiB",
    "peak memory, float32 -> float16",
    reference=weights,
    reference_label="float32 weights",
    colors=[palette[name] for name in rounds.names],
)
plt.show()

# %%
# Time and memory side by side, each bar the median of the rounds, its line
# their min-max:

names = rounds.names
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
colors = [palette[n] for n in names]
median_bars(axes[0], {n: rounds.seconds(n) for n in names}, "s", "wall time", colors)
median_bars(axes[1], {n: rounds.peaks(n) for n in names}, "MiB", "peak RSS growth", colors)
axes[1].axhline(weights, color="black", ls="--", lw=1, label="float32 weights")
legend_beside(axes[1])
fig.suptitle(f"float32 -> float16, {weights:.0f} MiB, {len(rounds.seconds(LIGHT))} rounds")
fig.tight_layout()

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# The recipe, its settings (inputs and outputs kept float32, block lists,
# clipping) and the command line: :ref:`l-howto-convert-float16`.
