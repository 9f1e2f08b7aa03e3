"""What ``make realworld`` runs: the models, and each verb's command and its reference.

A :class:`Source` is one exported folder and how its users load it. :func:`steps` lists
every verb to run on the sources (:class:`Step`: the worker's arguments, the output
folder, what the output is compared with): ``align``, ``convert`` (with onnxruntime's
float16 converter as the reference), ``save_edited``, ``info`` and ``verify`` on every
model file; ``dedup`` of each folder's files together and of the two onnxruntime-genai
folders together; ``quantize`` (with onnxruntime's ``MatMulNBitsQuantizer`` as the
reference) when ``onnx_light.onnx.quantize_weights`` exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import models


@dataclass(frozen=True)
class Source:
    """An exported folder.

    Attributes:
        name: its name in the report.
        folder: where it is.
        files: its model files, in the order optimum names them.
        loader: ``"causal"`` (``ORTModelForCausalLM``), ``"seq2seq"``, ``"genai"``
            (``og.Model``) or ``""`` (onnxruntime only).
        past: the export takes the key/value cache.
    """

    name: str
    folder: str
    files: tuple[str, ...]
    loader: str
    past: bool = True


@dataclass
class Step:
    """One verb on one source (or several, for dedup), and how its output is checked.

    Attributes:
        verb: ``align``, ``convert``, ``save_edited``, ``info``, ``verify``, ``dedup``
            or ``quantize``.
        sources: the sources it reads.
        commands: the worker's arguments (kind, then its own), one process each (one
            per model file, but dedup's one for all); the report adds their times and
            keeps their largest peaks.
        out: the output folder (None for info and verify).
        outputs: ``{source name: {source file: output file name}}``.
        references: the worker's arguments writing the reference outputs (onnxruntime's
            converter or quantizer) into ``ref_out``; none: the outputs are compared
            with their sources.
        ref_out: the references' folder.
        copy_files: the verb does not copy the exporter's files itself: the runner does.
    """

    verb: str
    sources: list[Source]
    commands: list[list[str]]
    out: str | None = None
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    references: list[list[str]] = field(default_factory=list)
    ref_out: str | None = None
    copy_files: bool = False

    @property
    def label(self) -> str:
        """The sources' names, ``+`` between them."""
        return "+".join(s.name for s in self.sources)


def sources(size: str) -> list[Source]:
    """Every exported folder, built (or taken from the cache) now."""
    t5 = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
    one = ("model.onnx",)
    return [
        Source("gpt2", models.gpt2_folder(past=True), one, "causal"),
        Source("gpt2-nopast", models.gpt2_folder(past=False), one, "causal", past=False),
        Source("t5", models.t5_folder(), t5, "seq2seq"),
        Source("bert", models.bert_folder(), one, ""),
        Source(f"llama-{size}", models.llama_folder(size), one, "causal"),
        Source(f"genai-fp32-{size}", models.genai_folder("fp32", size), one, "genai"),
        Source(f"genai-int4-{size}", models.genai_folder("int4", size), one, "genai"),
    ]


def _writer(verb: str, src: str, dst: str, with_files: bool) -> list[str]:
    """The worker's arguments of ``verb`` from ``src`` to ``dst``."""
    files = ["--with-files"] if with_files else []
    if verb == "align":
        return ["cli", "align", "-q", src, dst, *files]
    if verb == "convert":
        return ["cli", "convert", "-q", "--to", "float16", src, dst, *files]
    return [verb, src, dst]


def steps(all_sources: list[Source], work: str, with_files: bool, quantize: bool) -> list[Step]:
    """Every verb on every source, outputs under ``work/VERB/SOURCE``.

    Args:
        all_sources: from :func:`sources`.
        work: the run's folder.
        with_files: ``align`` and ``convert`` have ``--with-files`` (else the runner
            copies the exporter's files beside their outputs).
        quantize: ``onnx_light.onnx.quantize_weights`` exists.
    """
    out = []
    for s in all_sources:
        paths = [os.path.join(s.folder, f) for f in s.files]
        out += [Step(v, [s], [["cli", v, *paths]]) for v in ("info", "verify")]
        for verb in ("align", "convert", "save_edited", "quantize"):
            if verb == "quantize" and (not quantize or "int4" in s.name):
                continue  # the int4 folder has no float MatMul weight left
            dst = os.path.join(work, verb, s.name)
            commands = [
                _writer(verb, p, os.path.join(dst, f), with_files) for p, f in zip(paths, s.files)
            ]
            step = Step(verb, [s], commands, dst, {s.name: {f: f for f in s.files}})
            step.copy_files = verb in ("save_edited", "quantize") or not with_files
            if verb in ("convert", "quantize"):
                step.ref_out = os.path.join(work, f"{verb}-reference", s.name)
                kind = "ort_float16" if verb == "convert" else "ort_quantize"
                step.references = [
                    [kind, p, os.path.join(step.ref_out, f)] for p, f in zip(paths, s.files)
                ]
            out.append(step)
        if s.loader != "genai":  # one model, or the folder's files together
            dst = os.path.join(work, "dedup", s.name)
            argv = ["cli", "dedup", "-q", *paths, "--out", dst, "--with-files"]
            out.append(Step("dedup", [s], [argv], dst, {s.name: {f: f for f in s.files}}))
    genai = [s for s in all_sources if s.loader == "genai"]
    dst = os.path.join(work, "dedup", "genai")
    argv = ["cli", "dedup", "-q", *[os.path.join(s.folder, "model.onnx") for s in genai]]
    names = {s.name: {"model.onnx": f"{os.path.basename(s.folder)}_model.onnx"} for s in genai}
    out.append(Step("dedup", genai, [[*argv, "--out", dst, "--with-files"]], dst, names))
    return out
