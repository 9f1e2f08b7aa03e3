"""onnx-light: load, save and re-align large ONNX models without loading their weights.

The public API lives in :mod:`onnx_light.onnx`; the command line in :mod:`onnx_light.cli`.
"""

__version__ = "0.1.0"
