"""Shared pieces of the examples, benchmarks and tests.

- ``onnx_light.bench.memory``: the kernel's peak RSS (``VmHWM``) around an
  operation, and anonymous vs file-backed memory;
- ``onnx_light.bench.status``: the kernel's counters (``/proc/self/status``);
- ``onnx_light.bench.timeline``: RSS sampled over time on a background thread;
- ``onnx_light.bench.models``: synthetic Gemm models of any size, a
  tree ensemble (metadata only, millions of fields), and a model of many
  tiny tensors;
- ``onnx_light.bench.filesystems``: XFS and btrfs images, loop-mounted;
- ``onnx_light.bench.rounds``: the measuring method of the gallery and
  ``make bench``: each operation in a process of its own, interleaved
  rounds, the spread kept;
- ``onnx_light.bench.cache``: files dropped from the page cache;
- ``onnx_light.bench.compare``: what a gallery page says of two
  measurements: the words (a ranking, or "within this machine's noise")
  come from the gallery report (``benchmarks/results/gallery.json``,
  measured once by ``make gallery-report``), so every build states the same
  ones; each build shows its own figures and says whether they fall inside
  the report's range;
- ``onnx_light.bench.figures``: one-picture summaries for the gallery,
  medians of rounds side by side, and the site's palette (each tool its
  colour in every figure) and legends that cover no data;
- ``onnx_light.bench.machine``: which machine a measurement was made on;
- ``onnx_light.bench.sizes``: the full size of a measurement, or a quick one
  under ``UNITTEST_GOING=1``;
- ``onnx_light.bench.folders``: a destination emptied before each run, the
  bytes on disk, the digests that show a file was not touched;
- ``onnx_light.bench.places``: where each weight of a model lies (file,
  offset, length), from the ``.onnx`` alone;
- ``onnx_light.bench.command``: the ``onnx-light`` command run and shown as
  a reader would type it.

Only ``onnx_light.bench.models`` needs nothing beyond the core
dependencies; all work on Linux (``/proc``) and degrade elsewhere.
"""

from .cache import evict
from .command import show_command
from .compare import Comparison, compare
from .figures import (
    legend_beside,
    median_bars,
    other_color,
    summary_bars,
    tool_color,
    tool_colors,
)
from .folders import empty_folder, file_digests, mib_on_disk
from .machine import describe_machine
from .memory import PeakMemory, measure_peak, release_free_memory
from .models import (
    make_forest_model,
    make_gemm_model,
    make_many_tensors_model,
    model_inputs,
    weights_nbytes,
)
from .others import OthersCpu
from .places import tensor_places
from .rounds import Rounds, Run, default_rounds, measure_rounds, warm
from .sizes import quick_run, sized
from .status import read_status
from .timeline import RssTimeline, Sample

__all__ = [
    "show_command",
    "Comparison",
    "OthersCpu",
    "PeakMemory",
    "Rounds",
    "RssTimeline",
    "Run",
    "Sample",
    "compare",
    "default_rounds",
    "describe_machine",
    "empty_folder",
    "evict",
    "file_digests",
    "legend_beside",
    "make_forest_model",
    "make_gemm_model",
    "make_many_tensors_model",
    "measure_peak",
    "measure_rounds",
    "median_bars",
    "mib_on_disk",
    "model_inputs",
    "other_color",
    "quick_run",
    "read_status",
    "release_free_memory",
    "sized",
    "summary_bars",
    "tensor_places",
    "tool_color",
    "tool_colors",
    "warm",
    "weights_nbytes",
]
