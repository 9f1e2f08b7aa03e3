"""``python -m onnx_light``: the ``onnx-light`` command line."""

import sys

from onnx_light._command import main

sys.exit(main())
