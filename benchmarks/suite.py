"""What is measured, against what, and the targets (issue 5's table).

A :class:`Row` compares one figure of an operation with the same figure of its
reference, measured in the same round. Its target is either on the ratio
(``kind="ratio"``: median over rounds of the per-round ratio <= value) or on
the figure itself (``kind="abs"``: median figure <= value, in its unit);
``kind=None`` rows are for information.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024

# group -> (operations, which sources: "two" = every two-file size, "single" = single-file sizes)
GROUPS = {
    "align": (["copyfile", "align", "ir_align", "onnx_loadsave"], "two"),
    "inmem": (["light_loadsave", "onnx_loadsave"], "two"),
    "load": (["light_load2", "onnx_load"], "two"),
    "shared": (["shared_save", "full_save"], "two"),
    "skip": (["skip_load", "onnx_load_single"], "single"),
    "ort": (["ort_aligned", "ort_single"], "single"),
    "forest": (["forest_scan", "onnx_load_forest"], "single"),
    "align1": (["align_single", "ir_align_single"], "single"),
}
# operations whose memory involves memory-mapped files: sample RssAnon / RssFile apart
TIMELINE = {
    "copyfile",
    "align",
    "ir_align",
    "skip_load",
    "onnx_load_single",
    "ort_aligned",
    "ort_single",
    "align_single",
    "ir_align_single",
}

LABELS = {
    "copyfile": "shutil.copyfile of the .data",
    "align": "onnxl.align_external_data_streaming(4096)",
    "ir_align": "onnx_ir load + save(alignment=4096)",
    "onnx_loadsave": "onnx.load + onnx.save(external data)",
    "light_loadsave": "onnxl.load + onnxl.save(alignment=4096)",
    "onnx_load": "onnx.load (two-file)",
    "light_load2": "onnxl.load(num_threads=2) (two-file)",
    "shared_save": "onnxl.save_model_with_shared_external_data, 1/8 new",
    "full_save": "onnxl.save of the same variant (all in memory)",
    "skip_load": "onnxl.load(skip_raw_data=True) (single-file)",
    "onnx_load_single": "onnx.load (single-file)",
    "ort_aligned": "ort.InferenceSession, aligned two-file, no prepacking",
    "ort_single": "ort.InferenceSession, single-file, no prepacking",
    "forest_scan": "onnxl.load(skip_raw_data=True) of a tree ensemble (metadata only)",
    "onnx_load_forest": "onnx.load of the same tree ensemble",
    "align_single": "onnxl.align_external_data_streaming(4096) of the single-file model",
    "ir_align_single": "onnx_ir load + save(alignment=4096) of the single-file model",
}

FIGURES = {
    "seconds": "time",
    "peak": "peak RSS growth",
    "anon": "peak RssAnon growth (sampled)",
    "file": "peak RssFile growth (sampled)",
    "bytes": "bytes written",
    "cpu": "CPU time",
}


@dataclass(frozen=True)
class Row:
    group: str
    op: str
    figure: str
    ref: str
    kind: str | None = None
    target: float | None = None

    def target_text(self) -> str:
        if self.kind == "ratio":
            return f"<= {self.target:g}x"
        if self.kind == "abs":
            return f"<= {self.target / MiB:g} MiB" if self.figure != "seconds" else ""
        return ""


ROWS = [
    Row("align", "align", "seconds", "copyfile", "ratio", 1.15),
    Row("align", "align", "seconds", "ir_align", "ratio", 0.85),
    Row("align", "align", "seconds", "onnx_loadsave"),
    Row("align", "align", "peak", "ir_align", "abs", 8 * MiB),
    Row("align", "align", "anon", "ir_align"),
    Row("inmem", "light_loadsave", "seconds", "onnx_loadsave", "ratio", 0.5),
    Row("inmem", "light_loadsave", "peak", "onnx_loadsave"),
    Row("load", "light_load2", "seconds", "onnx_load", "ratio", 0.7),
    Row("load", "light_load2", "peak", "onnx_load"),
    Row("shared", "shared_save", "seconds", "full_save", "ratio", 0.25),
    Row("shared", "shared_save", "bytes", "full_save", "ratio", 0.15),
    Row("skip", "skip_load", "peak", "onnx_load_single", "abs", 64 * MiB),
    Row("skip", "skip_load", "seconds", "onnx_load_single"),
    Row("ort", "ort_aligned", "anon", "ort_single", "ratio", 1 / 20),
    Row("ort", "ort_aligned", "seconds", "ort_single"),
    Row("forest", "forest_scan", "seconds", "onnx_load_forest", "ratio", 2.0),
    Row("forest", "forest_scan", "peak", "onnx_load_forest"),
    Row("align1", "align_single", "seconds", "ir_align_single", "ratio", 1.0),
    Row("align1", "align_single", "peak", "ir_align_single", "abs", 8 * MiB),
]


def plan(groups: list[str], two_sizes: list[str], single_sizes: list[str]):
    """The operations to run per size, in order, without duplicates.

    Returns:
        A list of ``(size, [operations])``.
    """
    per_size: dict[str, list[str]] = {}
    for group in groups:
        ops, kind = GROUPS[group]
        for size in two_sizes if kind == "two" else single_sizes:
            lst = per_size.setdefault(size, [])
            lst += [op for op in ops if op not in lst]
    return list(per_size.items())
