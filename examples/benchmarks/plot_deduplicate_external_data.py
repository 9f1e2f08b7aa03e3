"""
.. _l-example-plot-deduplicate-external-data:

Weights stored once: three exported models, one weights file
============================================================

optimum exports a sequence-to-sequence model as three models, each with its
own weights file: an encoder, a decoder and a decoder with past key values.
The two decoders hold the same weights; the encoder holds the embedding
again. :func:`onnx_light.onnx.deduplicate_external_data` rewrites the three
so that they reference one weights file where each distinct tensor is
stored once, without loading any weight: it compares them on disk.

This example builds such a set (synthetic Gemm models, 16 weights of
1024 x 1024 per model, 64 MiB; 4 of 128 x 128 under ``UNITTEST_GOING=1``),
deduplicates it, checks that every model computes what it computed before,
and measures time, memory and bytes on disk against onnx-ir's
``DeduplicateInitializersPass``, which looks inside one model at a time.
"""

# %%
# An exporter's three models
# --------------------------
#
# The decoder and the decoder with past share every weight; the encoder
# shares the first one (the embedding) and has its own others.

import os
import shutil
import tempfile
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime
import pandas
from onnx_ir.passes.common import DeduplicateInitializersPass

import onnx_light.onnx as onnxl
from benchmarks.harness import (
    describe_machine,
    empty_folder,
    make_gemm_model,
    measure_rounds,
    median_bars,
    mib_on_disk,
    model_inputs,
    sized,
    summary_bars,
    weights_nbytes,
)

N_WEIGHTS, DIM = sized((16, 1024), quick=(4, 128))
MiB = 2**20

folder = tempfile.mkdtemp(prefix="onnx-light-dedup-")
export = os.path.join(folder, "export")
os.mkdir(export)
decoder = make_gemm_model(N_WEIGHTS, DIM, seed=0)
encoder = make_gemm_model(N_WEIGHTS, DIM, seed=1)
encoder.graph.initializer[0].CopyFrom(decoder.graph.initializer[0])  # the shared embedding
names = ["encoder_model", "decoder_model", "decoder_with_past_model"]
for name, model in zip(names, [encoder, decoder, decoder], strict=True):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnx.save turns the tensors it saves into references
    onnx.save(
        copy,
        os.path.join(export, f"{name}.onnx"),
        save_as_external_data=True,
        location=f"{name}.onnx_data",
    )
del encoder, decoder, copy
sources = [os.path.join(export, f"{name}.onnx") for name in names]
print(f"{len(names)} models, {mib_on_disk(export):.1f} MiB on disk")

# %%
# Deduplicate
# -----------
#
# One call, the three sources, their three destinations (in one folder) and
# the name of the weights file they share. The sources are not modified.

shared = os.path.join(folder, "shared")
os.mkdir(shared)
destinations = [os.path.join(shared, os.path.basename(s)) for s in sources]
result = onnxl.deduplicate_external_data(sources, destinations, "model.onnx_data")
print(
    f"{result.bytes_before / MiB:.1f} MiB of tensors -> {result.bytes_written / MiB:.1f} MiB "
    f"written, {len(result.groups)} groups of tensors share a range"
)
pandas.set_option("display.max_colwidth", None)  # the model names whole, never cut
pandas.DataFrame(
    {
        "read by": [", ".join(os.path.basename(m) for m, _ in group) for group in result.groups],
    },
    index=pandas.Index([group[0][1] for group in result.groups], name="tensor"),
).head(4)

# %%
# Every model computes what it computed before
# --------------------------------------------
#
# onnxruntime runs each source and each deduplicated model on the same
# inputs: the outputs are bit-identical. :func:`onnx.checker.check_model`
# accepts every model.

feeds = model_inputs(DIM, 2)


def run(path: str) -> np.ndarray:
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


for src, dst in zip(sources, destinations, strict=True):
    np.testing.assert_array_equal(run(src), run(dst))
    onnx.checker.check_model(dst)
print("same outputs, checker passes, for", ", ".join(names))

# %%
# Against onnx-ir, and a plain copy
# ---------------------------------
#
# onnx-ir's ``DeduplicateInitializersPass`` merges identical initializers
# inside one model (with its size limit raised: by default it skips tensors
# of more than 1024 elements, every weight that matters). It cannot share
# across models, so each model keeps its own file. A plain copy of the
# export gives the time of moving the bytes at all. Each way runs in a
# process of its own, in interleaved rounds
# (``benchmarks.harness.measure_rounds``), into a folder of its own
# emptied before each run (``benchmarks.harness.empty_folder``).


def with_onnx_light() -> None:
    out = os.path.join(folder, "onnx-light")
    dsts = [os.path.join(out, os.path.basename(s)) for s in sources]
    onnxl.deduplicate_external_data(sources, dsts, "model.onnx_data")


def with_onnx_ir() -> None:
    out = os.path.join(folder, "onnx-ir")
    for name in names:
        model = ir.load(os.path.join(export, f"{name}.onnx"))
        DeduplicateInitializersPass(size_limit=2**40)(model)
        ir.save(model, os.path.join(out, f"{name}.onnx"), external_data=f"{name}.onnx_data")


def plain_copy() -> None:
    shutil.copytree(export, os.path.join(folder, "copy"), dirs_exist_ok=True)


ways = {
    "onnx-light deduplicate": with_onnx_light,
    "onnx-ir DeduplicateInitializersPass": with_onnx_ir,
    "copy of the export (shutil)": plain_copy,
}
outputs = dict(zip(ways, ["onnx-light", "onnx-ir", "copy"], strict=True))
rounds = measure_rounds(
    ways,
    warm_files=[os.path.join(export, f) for f in os.listdir(export)],
    before=lambda way: empty_folder(os.path.join(folder, outputs[way])),
)
for way, fn in ways.items():  # once more, to keep the files and measure them
    empty_folder(os.path.join(folder, outputs[way]))
    fn()
table = pandas.DataFrame(rounds.summary()).set_index("operation")
table["MiB on disk"] = [mib_on_disk(os.path.join(folder, outputs[w])) for w in table.index]
table.round(3)

# %%
# What it says: the gallery report's words (a ranking only when it holds
# beyond the spread of the report's rounds), and where this build falls:

print(textwrap.fill(f"measured on {describe_machine()}", 100, subsequent_indent="  "))
print(rounds.compare("onnx-light deduplicate", "onnx-ir DeduplicateInitializersPass").sentence())
print(rounds.compare("onnx-light deduplicate", "copy of the export (shutil)").sentence())
unique = (N_WEIGHTS * 2 - 1) * weights_nbytes(1, DIM) / MiB
light, irs = table.loc["onnx-light deduplicate"], table.loc["onnx-ir DeduplicateInitializersPass"]
print(
    f"on disk: onnx-light {light['MiB on disk']:.1f} MiB (the distinct weights: {unique:.1f} MiB "
    f"and the small tensors),\n  onnx-ir {irs['MiB on disk']:.1f} MiB, the export "
    f"{mib_on_disk(export):.1f} MiB"
)
assert light["MiB on disk"] < 0.7 * mib_on_disk(export)
assert max(rounds.peaks("onnx-light deduplicate")) < 16, "the weights never enter the process"

# %%
# The result in one picture: bytes on disk after each way.

# sphinx_gallery_thumbnail_number = 1
summary_bars(
    list(table.index),
    list(table["MiB on disk"]),
    "MiB",
    "three exported models on disk",
    reference=unique,
    reference_label="distinct weights",
)
plt.show()

# %%
# Time and peak memory, median of the rounds and their min-max:

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))  # each tool its colour, as above
median_bars(axes[0], {w: rounds.seconds(w) for w in rounds.names}, "s", "wall time")
median_bars(axes[1], {w: rounds.peaks(w) for w in rounds.names}, "MiB", "peak RSS growth")
fig.suptitle(f"Deduplicate three models of {weights_nbytes(N_WEIGHTS, DIM) / MiB:.0f} MiB each")
fig.tight_layout()

# %%
# On real exports, against optimum's merge
# ----------------------------------------
#
# optimum's own answer to the duplicated decoders is ``merge_decoders``:
# it loads both decoders and merges them into one model with an ``If``
# node. It needs optimum, torch and real decoder graphs, which this site's
# build does not have, so its numbers come from the committed report of
# ``benchmarks/proofs/dedup_proof.py`` (random-weight exports of a T5-small-like
# model and a GPT-2-like decoder pair; the report says on which machine,
# when and with which versions). Medians over its rounds, each in a fresh
# process.

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(onnxl.__file__))))
report = os.path.join(ROOT, "benchmarks", "proofs", "results", "dedup_proof.csv")
if os.path.exists(report):
    proof = pandas.read_csv(report)
    proof = proof[proof["op"].isin(["onnx-light", "merge_decoders", "onnx-ir"])]
    proof = proof[proof["label"].isin(["t5", "gpt2_pair"])]
    real = proof.groupby(["label", "op"], sort=False).agg(
        seconds=("seconds", "median"),
        peak_GiB=("peak_growth", lambda v: v.median() / 2**30),
        MB_on_disk_after=("disk_after", lambda v: v.median() / 1e6),
        MB_before=("disk_before", lambda v: v.median() / 1e6),
    )
    print(f"from {os.path.relpath(report, ROOT)}")
else:  # an installed package without the repository's reports
    real = pandas.DataFrame()
    print("benchmarks/proofs/results/dedup_proof.csv is not here:")
    print("run benchmarks/proofs/dedup_proof.py")
real.round(2)

# %%
# Clean up
# --------

shutil.rmtree(folder, ignore_errors=True)

# %%
# The recipe, in place and with ``.safetensors`` files, is in
# :ref:`l-howto-deduplicate`, with the whole report on real exports.

# %%
# Related examples
# ----------------
#
# * :ref:`l-example-plot-save-model-with-shared-external-data`
# * :ref:`l-example-plot-align-external-data-streaming`
