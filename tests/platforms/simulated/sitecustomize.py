"""Starts the simulated platform named by ONNX_LIGHT_SIMULATE (a test tool, see
platform_simulation.py beside it), in every Python process that has this folder
on its PYTHONPATH: the test run and every child it starts."""

import os

if os.environ.get("ONNX_LIGHT_SIMULATE"):
    import platform_simulation

    platform_simulation.install(os.environ["ONNX_LIGHT_SIMULATE"])
