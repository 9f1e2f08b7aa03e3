"""
.. _l-example-plot-dedup:

Store the weights of two exported models once
=============================================

An exporter often writes the same weights twice: optimum exports a decoder
and a decoder with past key values as two models, each with its own weights
file, and both files hold the same bytes.
:func:`onnx_light.onnx.deduplicate_external_data` rewrites the two models so
that they read **one weights file where each distinct tensor is stored
once**. It reads only the models' graphs and compares the weights on disk:
no weight is loaded in memory, and the sources are left as they are.

This example builds such a pair, deduplicates it with the Python API and
with ``onnx-light dedup``, and checks what it claims: the bytes saved, both
models reading the same ranges of one file, the same outputs in
onnxruntime, the sources untouched. More (in place, ``.safetensors``,
onnxruntime-genai folders) is in :ref:`l-howto-deduplicate`; time and memory
against onnx-ir on three models are in
:ref:`l-example-plot-deduplicate-external-data`.
"""

# %%
# An exporter's pair
# ------------------
#
# The same weights saved twice by :func:`onnx.save`, once per model, each
# model with its own ``.onnx_data`` file, as optimum names them.

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
    mib_on_disk,
    model_inputs,
    show_command,
    sized,
    summary_bars,
    tensor_places,
    tool_color,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((16, 1024), quick=(4, 256))
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-dedup-")
export = os.path.join(folder, "export")
os.mkdir(export)
names = ["decoder_model", "decoder_with_past_model"]
for name in names:
    onnx.save(
        make_gemm_model(N_WEIGHTS, DIM, seed=0),  # the same weights in both
        os.path.join(export, f"{name}.onnx"),
        save_as_external_data=True,
        location=f"{name}.onnx_data",
    )
sources = [os.path.join(export, f"{name}.onnx") for name in names]
exported = file_digests(export)  # their sha256, to check later that nothing changed them
weights = weights_nbytes(N_WEIGHTS, DIM) / MiB
print(f"the export: {mib_on_disk(export):.1f} MiB on disk, twice {weights:.1f} MiB of weights")

# %%
# One call
# --------
#
# The sources, a destination for each (in one folder) and the name of the
# weights file they will share.

shared = os.path.join(folder, "shared")
os.mkdir(shared)
result = onnxl.deduplicate_external_data(
    sources, [os.path.join(shared, f"{name}.onnx") for name in names], "model.onnx_data"
)
saved = result.bytes_before - result.bytes_written
print(
    f"{result.bytes_before / MiB:.1f} MiB of tensors -> {result.bytes_written / MiB:.1f} MiB "
    f"written ({saved / MiB:.1f} MiB saved), {len(result.groups)} tensors stored once for both"
)
assert result.bytes_written < 0.55 * result.bytes_before, "each weight is written once"
assert mib_on_disk(shared) < 0.55 * mib_on_disk(export)

# %%
# Where each model reads its weights
# ----------------------------------
#
# Both models now point into ``model.onnx_data``, at the same offsets
# (:func:`onnx_light.bench.tensor_places` reads them from the ``.onnx``
# alone); ``onnx-light info`` lists the same from the command line.

places = [tensor_places(os.path.join(shared, f"{name}.onnx")) for name in names]
assert set(places[0].location) == set(places[1].location) == {"model.onnx_data"}
assert places[0].offset.tolist() == places[1].offset.tolist(), "the same ranges for both"
print(f"{len(places[0])} tensors, each at the same offset of model.onnx_data in both models")
show_command("info", "shared/decoder_with_past_model.onnx", lines=12, cwd=folder)

# %%
# The same outputs, and the sources untouched
# -------------------------------------------
#
# onnxruntime runs each source and its deduplicated copy on the same inputs:
# the outputs are bit-identical. The export's files are as they were.


def run(path: str) -> np.ndarray:
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, model_inputs(DIM))[0]


for name, src in zip(names, sources, strict=True):
    np.testing.assert_array_equal(run(src), run(os.path.join(shared, f"{name}.onnx")))
assert file_digests(export, exported) == exported
print("onnxruntime: the same outputs before and after, for", " and ".join(names))

# %%
# The command line
# ----------------
#
# ``onnx-light dedup`` does the same: ``--out`` names the destination folder
# (it must exist), ``--weights`` the shared file, and it says what it did.

os.mkdir(os.path.join(folder, "shared-cli"))
show_command(
    "dedup",
    "export/decoder_model.onnx",
    "export/decoder_with_past_model.onnx",
    "--out",
    "shared-cli",
    "--weights",
    "model.onnx_data",
    cwd=folder,
)
assert abs(mib_on_disk(os.path.join(folder, "shared-cli")) - mib_on_disk(shared)) < 0.01

# %%
# The picture
# -----------
#
# The bytes on disk before and after: the export holds every weight twice,
# the deduplicated pair once (the dashed line: one copy of the weights).

summary_bars(
    ["the export (onnx.save, two files)", "deduplicated (onnx-light, one file)"],
    [mib_on_disk(export), mib_on_disk(shared)],
    "MiB",
    "two exported models on disk",
    reference=weights,
    reference_label="one copy of the weights",
    colors=[tool_color("onnx"), tool_color("onnx-light")],
)
plt.show()

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-deduplicate-external-data`: three models, against
#   onnx-ir's ``DeduplicateInitializersPass``, time and memory.
# * :ref:`l-example-plot-shared-variant`: a variant that shares the first
#   model's weights file.
