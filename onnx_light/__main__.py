"""``python -m onnx_light``: the ``onnx-light`` command line."""

import sys

from onnx_light.cli import main

sys.exit(main())
