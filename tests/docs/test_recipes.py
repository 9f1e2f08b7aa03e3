"""The getting-started recipes run as a reader runs them, and stay short and public.

Each ``examples/getting_started/plot_*.py`` is copied alone into an empty
folder and run there by this interpreter, the folder as the current one, with
no ``PYTHONPATH``: nothing of the repository is on the path, only the
installed package. It must exit 0 (its checks are its own asserts) and leave
nothing but itself behind. Each is at most 90 lines and imports only the
standard library, numpy, onnx, onnxruntime, matplotlib and
:mod:`onnx_light.onnx`: nothing private, nothing of the benchmarks' harness.
The byte-for-byte proofs of what the recipes show are the library's tests.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "examples" / "getting_started").glob("plot_*.py"))
IDS = [recipe.name for recipe in RECIPES]
MAX_LINES = 90
THIRD_PARTY = {"numpy", "onnx", "onnxruntime", "matplotlib"}
TIMEOUT = 300


def reader_env() -> dict[str, str]:
    """This environment without the repository on the path, and without a display."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(UNITTEST_GOING="1", MPLBACKEND="Agg")
    return env


def test_recipes_found():
    assert RECIPES, "no examples/getting_started/plot_*.py"


def test_the_repository_is_not_on_a_recipes_path(tmp_path):
    code = "import sys, onnx_light.onnx; print(repr(sys.path))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=reader_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    path = [Path(p or tmp_path).resolve() for p in ast.literal_eval(proc.stdout)]
    assert ROOT not in path, path


@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_recipe_runs_alone_in_an_empty_folder(recipe: Path, tmp_path: Path):
    shutil.copyfile(recipe, tmp_path / recipe.name)
    proc = subprocess.run(
        [sys.executable, recipe.name],
        cwd=tmp_path,
        env=reader_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, (
        f"{recipe.name} exited with {proc.returncode}\n"
        f"--- stdout (end) ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
    )
    assert proc.stdout.strip(), f"{recipe.name} printed nothing of what it did"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [recipe.name], f"{recipe.name} left files in its folder: {left}"


def imported_modules(tree: ast.Module) -> list[str]:
    """Every module a script imports, and every name it imports from one (``module.name``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, "a relative import"
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def private_reason(module: str) -> str | None:
    """Why a recipe may not import ``module``, or None when it may."""
    parts = module.split(".")
    if any(part.startswith("_") for part in parts):
        return "a private name"
    if parts[0] == "onnx_light":
        return None if parts[:2] == ["onnx_light", "onnx"] else "not onnx_light.onnx"
    if parts[0] in THIRD_PARTY or parts[0] in sys.stdlib_module_names:
        return None
    return "not a package a reader has with onnx-light"


@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_recipe_is_short_and_imports_only_public_modules(recipe: Path):
    text = recipe.read_text(encoding="utf-8")
    lines = len(text.splitlines())
    assert lines <= MAX_LINES, f"{recipe.name}: {lines} lines, a recipe has at most {MAX_LINES}"
    tree = ast.parse(text)
    bad = {m: why for m in imported_modules(tree) if (why := private_reason(m)) is not None}
    assert not bad, f"{recipe.name} imports {bad}"
    private = sorted(
        {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.endswith("__")
        }
    )
    assert not private, f"{recipe.name} reaches private attributes: {private}"


@pytest.mark.parametrize(
    "module, allowed",
    [
        ("onnx_light.onnx", True),
        ("onnx_light.onnx.SerializeOptions", True),
        ("onnx.external_data_helper.ExternalDataInfo", True),
        ("pathlib.Path", True),
        ("onnx_light.onnx._io", False),
        ("onnx_light._inspect", False),
        ("onnx_light.bench", False),
        ("onnx_light.cli", False),
        ("benchmarks.harness", False),
        ("pandas", False),
    ],
)
def test_the_import_rule(module: str, allowed: bool):
    assert (private_reason(module) is None) is allowed
