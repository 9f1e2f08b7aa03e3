"""Shared pieces of the examples, benchmarks and tests: the benchmarks' harness.

It lives beside the benchmarks, in the checkout, and is not part of the
installed package; scripts and tests import it as ``benchmarks.harness`` with
the checkout's root on ``sys.path``. Nothing here changes the machine it
measures (no kernel setting, no memory touched beforehand, no global cache
drop): a cold read evicts only the files it measures.

- ``benchmarks.harness.memory``: the kernel's peak RSS (``VmHWM``) around an
  operation, and anonymous vs file-backed memory;
- ``benchmarks.harness.status``: the kernel's counters (``/proc/self/status``);
- ``benchmarks.harness.timeline``: RSS sampled over time on a background thread;
- ``benchmarks.harness.models``: synthetic Gemm models of any size, a
  tree ensemble (metadata only, millions of fields), and a model of many
  tiny tensors;
- ``benchmarks.harness.filesystems``: XFS and btrfs images, loop-mounted;
- ``benchmarks.harness.rounds``: the measuring method of the gallery and
  ``make bench``: each operation in a process of its own, interleaved
  rounds, the spread kept;
- ``benchmarks.harness.cache``: files dropped from the page cache;
- ``benchmarks.harness.compare``: what a gallery page says of two
  measurements: the words (a ranking, or "within this machine's noise")
  come from the gallery report (``benchmarks/results/gallery.json``,
  measured once by ``make gallery-report``), so every build states the same
  ones; each build shows its own figures and says whether they fall inside
  the report's range;
- ``benchmarks.harness.figures``: one-picture summaries for the gallery,
  medians of rounds side by side, and the site's palette (each tool its
  colour in every figure) and legends that cover no data;
- ``benchmarks.harness.machine``: which machine a measurement was made on;
- ``benchmarks.harness.sizes``: the full size of a measurement, or a quick one
  under ``UNITTEST_GOING=1``;
- ``benchmarks.harness.folders``: a destination emptied before each run, the
  bytes on disk, the digests that show a file was not touched;
- ``benchmarks.harness.places``: where each weight of a model lies (file,
  offset, length), from the ``.onnx`` alone;
- ``benchmarks.harness.command``: the ``onnx-light`` command run and shown as
  a reader would type it.

Only ``benchmarks.harness.models`` needs nothing beyond the core
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
