"""Recipes of the how-to pages, run as printed against models the test builds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import read_back
from test_real_places import _hf_snapshot

DOC = os.path.join(os.path.dirname(__file__), "..", "_doc")


def _section(page: str, title: str) -> str:
    """The text of one section of an .rst page (up to the next title of its level)."""
    with open(os.path.join(DOC, page)) as f:
        text = f.read()
    start = text.index(title + "\n" + "-" * len(title))
    rest = text[start + 2 * len(title) + 2 :]
    end = re.search(r"\n[^\n]+\n-{3,}\n", rest)
    return rest[: end.start()] if end else rest


def _blocks(section: str, language: str) -> list[str]:
    """Every ``.. code-block:: <language>`` of a section, dedented."""
    out = []
    for m in re.finditer(rf"\.\. code-block:: {language}\n\n", section):
        lines = section[m.end() :].split("\n")
        indent = len(lines[0]) - len(lines[0].lstrip())
        body = []
        for line in lines:
            if line.strip() and len(line) - len(line.lstrip()) < indent:
                break
            body.append(line)
        out.append(textwrap.dedent("\n".join(body)).strip() + "\n")
    return out


@pytest.fixture
def hf_home(tmp_path):
    """A HOME whose Hugging Face cache holds models--onnx-community--tiny (both files linked)."""
    home = tmp_path / "home"
    hub = home / ".cache" / "huggingface" / "hub"
    hub.mkdir(parents=True)
    path, tensors = _hf_snapshot(hub, "both-linked")
    os.rename(hub / "models--org--name", hub / "models--onnx-community--tiny")
    os.rmdir(hub / "work")
    return home, tensors


def _env(home) -> dict:
    env = dict(os.environ, HOME=str(home))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


@pytest.mark.parametrize("language", ["python", "bash"])
def test_align_from_a_hugging_face_cache(hf_home, tmp_path, language):
    home, tensors = hf_home
    (block,) = _blocks(
        _section("howto/align_external_data_streaming.rst", "From a Hugging Face cache"), language
    )
    work = tmp_path / "work"
    work.mkdir()
    cmd = [sys.executable, "-c", block] if language == "python" else ["bash", "-e", "-c", block]
    done = subprocess.run(cmd, cwd=work, env=_env(home), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = work / "tiny-aligned" / "model.onnx"
    assert read_back(out) == tensors
    assert not any(os.path.islink(p) for p in (work / "tiny-aligned").iterdir())
