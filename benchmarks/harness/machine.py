"""Which machine a measurement was made on, in one line."""

from __future__ import annotations

import os
import platform


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _ram() -> str:
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        return f"{kib / 1024**2:.1f} GiB RAM"
    except (OSError, ValueError, IndexError):
        return "unknown RAM"


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:  # any import failure just says "missing"
        return "missing"


def describe_machine() -> str:
    """CPU, cores, RAM, kernel, Python and the versions of the libraries compared.

    Measured times and ratios depend on them: the gallery and the benchmarks
    print this line next to every number they state.

    Returns:
        One line, e.g. ``"AMD EPYC, 2 cores, 23.5 GiB RAM, Linux 6.1, Python 3.11.7,
        onnx 1.23.2, onnxruntime 1.32.0, onnx-ir 1.1.0, numpy 2.4.6, onnx-light 0.1.0"``.
    """
    return (
        f"{_cpu_model()}, {os.cpu_count()} cores, {_ram()}, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"onnx {_version('onnx')}, onnxruntime {_version('onnxruntime')}, "
        f"onnx-ir {_version('onnx_ir')}, numpy {_version('numpy')}, "
        f"onnx-light {_version('onnx_light')}"
    )
