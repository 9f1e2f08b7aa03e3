"""Names vulture may not see used: the public API, used by callers outside this repository.

``make lint`` runs vulture on ``onnx_light``, ``benchmarks`` and ``examples``
together, with this file: a function, class or attribute nobody uses is dead
code, unless it is public and listed here.
"""

import onnx_light.onnx as onnxl
from onnx_light.bench import PeakMemory, RssTimeline

onnxl.AlignResult.unreferenced  # read by callers after an in-place re-align
onnxl.AlignResult.removed
onnxl.ExternalDataError.reason  # for callers deciding on the kind of error
PeakMemory.exact  # whether the peak is the kernel's own
RssTimeline.growth_of
