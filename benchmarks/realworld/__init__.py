"""``make realworld``: every verb on real exports, checked by the tools that load them.

The models (:mod:`benchmarks.realworld.models`) are built from configs with random
weights, nothing downloaded, and kept in a cache a second run reuses; each verb runs in
a fresh process (:mod:`benchmarks.realworld.worker`); its output is checked by onnx,
onnxruntime, optimum and onnxruntime-genai (:mod:`benchmarks.realworld.checks`);
:mod:`benchmarks.realworld.run` does the whole run and writes the report.
"""
