"""Every gallery example runs on its own, at small sizes, without error.

Each ``examples/*/plot_*.py`` runs in a fresh interpreter with
``UNITTEST_GOING=1`` (small models) and ``MPLBACKEND=Agg`` (no display), from
an empty temporary folder so a script that writes next to itself is caught.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*/plot_*.py"))
TIMEOUT = 600


def test_examples_found():
    assert SCRIPTS, f"no examples/*/plot_*.py under {EXAMPLES}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{s.parent.name}/{s.name}" for s in SCRIPTS])
def test_example_runs(script: Path, tmp_path: Path):
    env = dict(os.environ, UNITTEST_GOING="1", MPLBACKEND="Agg")
    root = str(EXAMPLES.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, (
        f"{script.name} exited with {proc.returncode}\n"
        f"--- stdout (end) ---\n{proc.stdout[-3000:]}\n"
        f"--- stderr ---\n{proc.stderr[-6000:]}"
    )
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert not leftovers, f"{script.name} left files in its working folder: {leftovers}"
