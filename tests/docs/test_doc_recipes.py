"""Every recipe of the how-to pages and of the README, run as printed.

The code blocks of a page run in order, Python in one namespace and shell
blocks with ``bash -e``, in a temporary folder holding the files the pages
name (``model.onnx``, ``single.onnx``, ``many.onnx``, ``models/first.onnx``,
a Hugging Face cache under a temporary ``HOME``...), built by the test. A
block that shows an error says so in a comment (``# FileNotFoundError: ...``):
it must raise that error. A block that shows what a ``print`` prints, as comment
lines right after the call (``print(x)`` then ``# ['a', 'b']``), must print
that: ``...`` in the comment stands for any text, ``<like this>`` for a value
the page describes. A comment on the line of the call itself is prose (``#
still on disk``), not output. Nothing else is substituted.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from helpers import hf_snapshot, read_back, save_two_file, write_safetensors
from onnx import numpy_helper

from benchmarks.harness import make_gemm_model

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
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
    for name in ("fp32", "tuned"):  # onnxruntime-genai's layout: one model.onnx per folder
        (folder / name).mkdir()
        save_two_file(model, folder / name / "model.onnx", location="model.onnx.data")
        genai = {"model": {"decoder": {"filename": "model.onnx"}}}
        (folder / name / "genai_config.json").write_text(json.dumps(genai))
        (folder / name / "tokenizer.json").write_text("{}")
    hub = home / ".cache" / "huggingface" / "hub"
    hub.mkdir(parents=True)
    hf_snapshot(hub, "both-linked")
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


def shown_output(code: str) -> dict[tuple[int, int], str]:
    """{(first line, last line) of a ``print(...)`` call: the output the page shows for it}.

    The output is the comment lines right after the call (no blank line between),
    each without its ``#``; an error shown there is left to :func:`_run_expecting`.
    """
    lines = code.split("\n")
    out = {}
    for node in ast.walk(ast.parse(code)):
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "print"):
            continue
        shown = []
        for line in lines[node.end_lineno :]:
            if not line.strip().startswith("#"):
                break
            shown.append(line.strip()[1:].strip())
        if shown and not re.match(r"\w+Error: ", shown[0]):
            out[(node.lineno, node.end_lineno)] = "\n".join(shown)
    return out


def _same_as_shown(shown: str, printed: str) -> bool:
    """True when ``printed`` reads as ``shown``: ``...`` and ``<...>`` stand for any text."""
    pieces = re.split(r"\.\.\.|<[^<>\n]+>", shown)
    pattern = ".*?".join(re.escape(piece) for piece in pieces)
    text = "\n".join(line.strip() for line in printed.strip().split("\n"))
    return re.fullmatch(pattern, text, re.S) is not None


class _Prints:
    """``print`` for a block: prints as usual, and keeps what each line of the block printed."""

    def __init__(self, filename: str) -> None:
        self.filename = filename
        self.by_line: list[tuple[int, str]] = []

    def __call__(self, *args, file=None, **kwargs) -> None:
        if file is not None:
            builtins.print(*args, file=file, **kwargs)
            return
        buffer = io.StringIO()
        builtins.print(*args, file=buffer, **kwargs)
        frame = sys._getframe(1)
        if frame.f_code.co_filename == self.filename:
            self.by_line.append((frame.f_lineno, buffer.getvalue()))
        sys.stdout.write(buffer.getvalue())


def _run_expecting(code: str, filename: str, scope: dict) -> int:
    """Run a block; one that shows an error must raise it, with the message it prints, and
    each ``print`` whose output it shows must print that.

    Returns:
        The number of outputs compared.
    """
    prints = scope["print"] = _Prints(filename)
    error = _expected_error(code)
    try:
        if error is None:
            exec(compile(code, filename, "exec"), scope)  # noqa: S102
        else:
            with pytest.raises(error) as info:
                exec(compile(code, filename, "exec"), scope)  # noqa: S102
            message = " ".join(str(info.value).split())
            for piece in _printed_error(code):
                assert piece in message, f"the page prints {piece!r}; a reader gets {message!r}"
    finally:
        del scope["print"]
    shown = shown_output(code)
    for (first, last), expected in shown.items():
        printed = "".join(text for line, text in prints.by_line if first <= line <= last)
        assert printed, f"{filename}: the print of line {first} shows output but never ran"
        assert _same_as_shown(expected, printed), (
            f"{filename}, line {first}: the page shows\n{expected}\na reader gets\n{printed}"
        )
    return len(shown)


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
    compared = 0
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
            compared += _run_expecting(code, f"{page}, block {i + 1}", scope)
    shows = sum(len(shown_output(code)) for lang, code, _ in found if lang == "python")
    assert compared == shows, f"{page}: {shows} outputs shown, {compared} compared"


def test_the_pages_that_show_output_are_compared():
    """The comparison is not vacuous: the pages that show printed output are found."""
    showing = {
        page
        for page in PAGES
        for lang, code, _ in blocks(page)
        if lang == "python" and shown_output(code)
    }
    assert {
        os.path.join("_doc", "howto", "load_save.rst"),
        os.path.join("_doc", "howto", "align_external_data_streaming.rst"),
    } <= showing
    assert _same_as_shown("['a', ...]", "['a', 'b', 'c']\n")
    assert _same_as_shown("{'offset': '<where>', 'n': ...}", "{'offset': '4096', 'n': 3}")
    assert not _same_as_shown("['a', 'b']", "['a', 'c']")
    assert not _same_as_shown("['a', ...]", "['b', 'a']")


def _has_onnx_tab(page: str) -> bool:
    return any(tab is not None and tab.lower() == "onnx" for _, _, tab in blocks(page))


ONNX_TAB_PAGES = [page for page in PAGES if _has_onnx_tab(page)]


def test_some_page_has_onnx_tabs():
    assert ONNX_TAB_PAGES, "no page compares with onnx: the script test below runs on nothing"


@pytest.mark.parametrize("page", ONNX_TAB_PAGES)
def test_onnx_tabs_run_in_order_as_a_script(page, tmp_path, monkeypatch):
    """A reader who follows onnx's side of every comparison: the shared blocks and the
    "onnx" tabs, in order, in one folder and one namespace (onnx 1.23 refuses to
    write over an existing weights file, so two tabs may not reuse a name)."""
    found = [
        (lang, code) for lang, code, tab in blocks(page) if tab is None or tab.lower() == "onnx"
    ]
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    _fixtures(work, home)
    monkeypatch.chdir(work)
    namespace: dict = {"__name__": "__recipe__"}
    for i, (language, code) in enumerate(found):
        if language != "python":
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            _run_expecting(code, f"{page}, onnx script block {i + 1}", namespace)


def test_hugging_face_recipe_writes_plain_files(tmp_path, monkeypatch):
    """The cache recipe, checked further: the copy holds the model, as plain files."""
    home = tmp_path / "home"
    hub = home / ".cache" / "huggingface" / "hub"
    hub.mkdir(parents=True)
    _, tensors = hf_snapshot(hub, "both-linked")
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


def test_the_howtos_model_is_the_one_their_outputs_come_from(tmp_path, monkeypatch):
    """The how-to index's lines make the ``model.onnx`` the pages print outputs of:
    run in an empty folder, they write the very files the pages' recipes run on here."""
    [(language, code, _)] = blocks(os.path.join("_doc", "howto", "index.rst"))
    assert language == "python"
    made, fixture = tmp_path / "made", tmp_path / "fixture"
    made.mkdir()
    fixture.mkdir()
    monkeypatch.chdir(made)
    exec(compile(code, "howto/index.rst", "exec"), {})
    monkeypatch.chdir(fixture)  # onnx.save looks for the location from the current folder
    save_two_file(make_gemm_model(4, 256), fixture / "model.onnx", location="model.onnx.data")
    for name in ("model.onnx", "model.onnx.data"):
        assert (made / name).read_bytes() == (fixture / name).read_bytes(), name
