"""One verb in a fresh process, its time and peak memory measured.

Usage: ``python -m benchmarks.realworld.worker RESULT.json KIND ARG...``. ``KIND``:

- ``cli``: ``onnx-light ARG...`` (:func:`onnx_light._command.main`, in this process);
- ``save_edited SRC DST``: the model loaded without its weights
  (``load(SRC, load_external_data=False, skip_raw_data=True)``), a metadata entry
  added (an edit no output depends on), ``save_edited(model, SRC, DST)``: a compact copy;
- ``ort_float16 SRC DST``: onnxruntime's converter, the usual way (``onnx.load``,
  ``convert_float_to_float16``, ``onnx.save`` with external data); over 2 GiB, where
  onnx's shape inference refuses the loaded proto, the converter given the path (its
  own way around the limit: ``infer_shapes_path``);
- ``quantize SRC DST``: ``onnx_light.onnx.quantize_weights(SRC, DST)``, its defaults;
- ``ort_quantize SRC DST``: onnxruntime's ``MatMulNBitsQuantizer`` with its defaults
  (4 bits, blocks of 128, asymmetric), the usual way (``onnx.load``, ``process``,
  ``save_model_to_file`` with external data).

The operation's imports are done before the clock starts. ``RESULT.json`` gets the
exit code (1 with the error's last line when it raised), the seconds, the kernel's
peak RSS of the process (``VmHWM``, reset before the operation) and the peaks of
anonymous and file-backed memory apart (``RssAnon``, ``RssFile``, sampled every
millisecond), all absolute: the interpreter and its imports included.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.harness.memory import release_free_memory, reset_peak  # noqa: E402
from benchmarks.harness.status import read_status  # noqa: E402
from benchmarks.harness.timeline import RssTimeline  # noqa: E402


def _save_edited(src: str, dst: str) -> int:
    import onnx_light.onnx as onnxl

    model = onnxl.load(src, load_external_data=False, skip_raw_data=True)
    entry = model.metadata_props.add()
    entry.key, entry.value = "edited_by", "make realworld"
    onnxl.save_edited(model, src, dst)
    return 0


def _ort_float16(src: str, dst: str) -> int:
    import onnx
    from google.protobuf.message import EncodeError
    from onnxruntime.transformers import float16

    try:
        model = float16.convert_float_to_float16(onnx.load(src))
    except (ValueError, EncodeError) as e:  # over 2 GiB: onnx's shape inference refuses it
        if not isinstance(e, EncodeError) and "2GB" not in str(e):
            raise
        # the converter's own way around it: given the path
        print("way: the converter given the path (over 2 GiB)")
        model = float16.convert_float_to_float16(src)
    location = os.path.basename(dst) + ".data"
    onnx.save(model, dst, save_as_external_data=True, location=location)
    return 0


def _quantize(src: str, dst: str) -> int:
    import onnx_light.onnx as onnxl

    r = onnxl.quantize_weights(src, dst)
    print(f"{r.weights} weights quantized")
    return 0


def _ort_quantize(src: str, dst: str) -> int:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(onnx.load(src))
    q.process()
    q.model.save_model_to_file(dst, use_external_data_format=True)
    return 0


def _prepare(kind: str):
    """Import what ``kind`` runs (outside the clock) and return the callable."""
    if kind == "cli":
        import onnx_light.cli  # noqa: F401
        from onnx_light._command import main

        return lambda *argv: main(list(argv))
    if kind in ("save_edited", "quantize"):
        import onnx_light.onnx  # noqa: F401

        return _save_edited if kind == "save_edited" else _quantize
    if kind == "ort_float16":
        import onnx  # noqa: F401
        from onnxruntime.transformers import float16  # noqa: F401

        return _ort_float16
    if kind == "ort_quantize":
        from onnxruntime.quantization import matmul_nbits_quantizer  # noqa: F401

        return _ort_quantize
    raise SystemExit(f"unknown kind {kind!r}")


def main(argv: list[str]) -> int:
    result_path, kind, *args = argv
    fn = _prepare(kind)
    release_free_memory()
    exact = reset_peak()
    out = io.StringIO()
    error = None
    t0 = time.perf_counter()
    with RssTimeline(interval=0.001) as tl:
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = fn(*args)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except Exception as e:
            code = 1
            error = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=out)
    seconds = time.perf_counter() - t0
    status = read_status()
    record = {
        "exit": code,
        "error": error,
        "seconds": seconds,
        "vm_hwm": status.get("VmHWM", 0) if exact else tl.peak("rss"),
        "peak_anon": tl.peak("anon"),
        "peak_file": tl.peak("file"),
        "output": out.getvalue()[-4000:],
    }
    with open(result_path, "w") as f:
        json.dump(record, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
