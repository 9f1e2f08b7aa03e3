"""Every recipe of the how-to pages and of the README, run as printed.

The code blocks of a page run in order, Python in one namespace and shell
blocks with ``bash -e``, in a temporary folder holding the files the pages
name (``model.onnx``, ``single.onnx``, ``many.onnx``, ``models/first.onnx``,
a Hugging Face cache under a temporary ``HOME``...), built by the test. A
block that shows an error says so in a comment (``# FileNotFoundError: ...``):
it must raise that error. Nothing else is substituted.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from conftest import read_back, save_two_file, write_safetensors
from onnx import numpy_helper
from test_hf_cache import _hf_snapshot

from onnx_light.bench import make_gemm_model

ROOT = os.path.join(os.path.dirname(__file__), "..")
PAGES = sorted(
    os.path.join("_doc", "howto", name)
    for name in os.listdir(os.path.join(ROOT, "_doc", "howto"))
    if name.endswith(".rst") and name != "index.rst"
) + ["README.md", os.path.join("_doc", "index.rst")]


def _tab(text: str, pos: int) -> str | None:
    """The name of the tab-item a block at ``pos`` sits in, if any."""
    tabs = list(re.finditer(r"\n([ \t]*)\.\. tab-item:: ([^\n]+)", text[:pos]))
    if not tabs:
        return None
    last = tabs[-1]
    after = text[last.end() : pos]  # still inside it: no line indented less than the item
    indent = len(last.group(1))
    for line in after.split("\n")[1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            return None
    return last.group(2).strip()


def rst_blocks(text: str) -> list[tuple[str, str, str | None]]:
    """``(language, code, tab)`` of every ``.. code-block::`` of an .rst text, in order."""
    out = []
    for m in re.finditer(r"\.\. code-block:: (\w+)\n((?:[ \t]*:[^\n]*\n)*)\n", text):
        lines = text[m.end() :].split("\n")
        indent = len(lines[0]) - len(lines[0].lstrip())
        body = []
        for line in lines:
            if line.strip() and len(line) - len(line.lstrip()) < indent:
                break
            body.append(line)
        code = textwrap.dedent("\n".join(body)).strip() + "\n"
        out.append((m.group(1), code, _tab(text, m.start())))
    return out


def md_blocks(text: str) -> list[tuple[str, str, str | None]]:
    """``(language, code, None)`` of every fenced block of a Markdown text."""
    return [(m[1], m[2], None) for m in re.finditer(r"```(\w+)\n(.*?)```", text, re.S)]


def blocks(page: str) -> list[tuple[str, str, str | None]]:
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    found = md_blocks(text) if page.endswith(".md") else rst_blocks(text)
    return [b for b in found if b[0] in ("python", "bash")]


def _fixtures(folder, home) -> None:
    """The files the pages name."""
    model = make_gemm_model(4, 256)
    save_two_file(model, folder / "model.onnx", location="model.onnx.data")
    onnx.save(model, str(folder / "single.onnx"))
    save_two_file(model, folder / "many.onnx", per_tensor=True)
    (folder / "models").mkdir()
    save_two_file(model, folder / "models" / "first.onnx", location="first.onnx.data")
    w0 = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    np.save(folder / "w0_finetuned.npy", w0)
    # an exporter's pair: every weight of the decoder again in the decoder with past
    (folder / "export").mkdir()
    for name in ("decoder_model", "decoder_with_past_model"):
        save_two_file(model, folder / "export" / f"{name}.onnx", location=f"{name}.onnx_data")
    write_safetensors(
        folder / "export" / "model.safetensors",
        {t.name: numpy_helper.to_array(t) for t in model.graph.initializer},
    )
    hub = home / ".cache" / "huggingface" / "hub"
    hub.mkdir(parents=True)
    _hf_snapshot(hub, "both-linked")
    os.rename(hub / "models--org--name", hub / "models--onnx-community--tiny")
    os.rmdir(hub / "work")


def _expected_error(code: str) -> type[BaseException] | None:
    m = re.search(r"^\s*# (\w+Error): ", code, re.M)
    return getattr(builtins, m.group(1)) if m else None


def _printed_error(code: str) -> list[str]:
    """The pieces of the error message a block prints in its comment (``...`` elides)."""
    m = re.search(r"^\s*# \w+Error: (.*(?:\n\s*# .*)*)", code, re.M)
    if not m:
        return []
    text = " ".join(line.strip().lstrip("#").strip() for line in m.group(1).split("\n"))
    return [" ".join(piece.split()) for piece in text.split("...") if piece.strip()]


def _run_expecting(code: str, page: str, scope: dict) -> None:
    """Run a block; one that shows an error must raise it, with the message it prints."""
    error = _expected_error(code)
    if error is None:
        exec(compile(code, page, "exec"), scope)  # noqa: S102
        return
    with pytest.raises(error) as info:
        exec(compile(code, page, "exec"), scope)  # noqa: S102
    message = " ".join(str(info.value).split())
    for piece in _printed_error(code):
        assert piece in message, f"the page prints {piece!r}; a reader gets {message!r}"


@pytest.mark.parametrize("page", PAGES)
def test_recipes_run_as_printed(page, tmp_path, monkeypatch):
    found = blocks(page)
    if not found:
        pytest.skip("no code block")
    pristine, work, home = tmp_path / "pristine", tmp_path / "work", tmp_path / "home"
    pristine.mkdir()
    home.mkdir()
    _fixtures(pristine, home)
    shutil.copytree(pristine, work, symlinks=True)
    monkeypatch.setenv("HOME", str(home))
    env = dict(os.environ, HOME=str(home))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    namespace: dict = {"__name__": "__recipe__"}
    for i, (language, code, tab) in enumerate(found):
        where = f"{page}, block {i + 1}:\n{code}"
        # onnx's side of a comparison runs on its own copy: a reader picks one tab
        aside = tab is not None and tab.lower() == "onnx"
        folder = tmp_path / f"aside-{i}" if aside else work
        if aside:
            shutil.copytree(pristine, folder, symlinks=True)
        monkeypatch.chdir(folder)
        if language == "bash":
            if code.lstrip().startswith(("make ", "git ", "pip ")):
                continue  # setting up the project, not a recipe
            done = subprocess.run(
                ["bash", "-e", "-c", code], cwd=folder, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, f"{where}\n{done.stderr}"
            continue
        scope = dict(namespace) if aside else namespace
        with contextlib.redirect_stdout(io.StringIO()):
            _run_expecting(code, page, scope)


@pytest.mark.parametrize("page", PAGES)
def test_onnx_tabs_run_in_order_as_a_script(page, tmp_path, monkeypatch):
    """A reader who follows onnx's side of every comparison: the shared blocks and the
    "onnx" tabs, in order, in one folder and one namespace (onnx 1.23 refuses to
    write over an existing weights file, so two tabs may not reuse a name)."""
    found = [(lang, code) for lang, code, tab in blocks(page) if tab in (None, "onnx")]
    if not any(tab == "onnx" for _, _, tab in blocks(page)):
        pytest.skip("no onnx tab")
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    _fixtures(work, home)
    monkeypatch.chdir(work)
    namespace: dict = {"__name__": "__recipe__"}
    for language, code in found:
        if language != "python":
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            _run_expecting(code, page, namespace)


def test_hugging_face_recipe_writes_plain_files(tmp_path, monkeypatch):
    """The cache recipe, checked further: the copy holds the model, as plain files."""
    home = tmp_path / "home"
    hub = home / ".cache" / "huggingface" / "hub"
    hub.mkdir(parents=True)
    _, tensors = _hf_snapshot(hub, "both-linked")
    os.rename(hub / "models--org--name", hub / "models--onnx-community--tiny")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    page = os.path.join("_doc", "howto", "align_external_data_streaming.rst")
    code = next(c for lang, c, _ in blocks(page) if lang == "python" and "huggingface" in c)
    exec(compile(code, page, "exec"), {})  # noqa: S102
    out = tmp_path / "tiny-aligned"
    assert read_back(out / "model.onnx") == tensors
    assert not any(os.path.islink(p) for p in out.iterdir())


def test_house_style_tree_matches_the_code():
    """Every module of the package appears in the house-style page's tree, and only those."""
    with open(os.path.join(ROOT, "_doc", "design", "house_style.rst")) as f:
        text = f.read()
    listed = set(re.findall(r"^\s+((?:onnx/)?_?\w+\.py)\s", text, re.M))
    package = os.path.join(ROOT, "onnx_light")
    actual = {
        name if folder == package else f"onnx/{name}"
        for folder in (package, os.path.join(package, "onnx"))
        for name in os.listdir(folder)
        if name.endswith(".py")
        and name not in ("__main__.py",)
        and not (folder == package and name == "__init__.py")
    }
    assert listed == actual
