"""Names vulture may not see used: the public API, used by callers outside this repository.

``make lint`` runs vulture on ``onnx_light``, ``benchmarks`` and ``examples``
together, with this file: a function, class or attribute nobody uses is dead
code, unless it is public and listed here.
"""

import onnx_light.onnx as onnxl
from benchmarks.harness import PeakMemory, RssTimeline

onnxl.AlignResult.unreferenced  # read by callers after an in-place re-align
onnxl.AlignResult.removed
onnxl.ExternalDataError.reason  # for callers deciding on the kind of error
PeakMemory.exact  # whether the peak is the kernel's own
RssTimeline.growth_of

import onnxruntime  # noqa: E402

onnxruntime.SessionOptions.log_severity_level  # set by examples: onnxruntime reads it
onnxruntime.SessionOptions.intra_op_num_threads
onnxruntime.SessionOptions.inter_op_num_threads
onnxruntime.SessionOptions.optimized_model_filepath  # ort_prepacking.py's saved copy
onnxruntime.SessionOptions.enable_cpu_mem_arena
onnxl.DedupResult.unreferenced  # read by callers after an in-place dedup
onnxl.DedupResult.removed

import types  # noqa: E402

_torch = types.SimpleNamespace()  # benchmarks/proofs/dedup_proof.py's torch modules
_torch.forward  # torch.nn.Module.__call__ runs it
_torch.embed_tokens  # set on a transformers model, which reads it

_tokenizers = types.SimpleNamespace()  # benchmarks/realworld/models.py's tokenizers.Tokenizer
_tokenizers.pre_tokenizer  # set on it, read by tokenizers when it encodes
