"""Every loader's link rules: what we write loads in all three, and ``verify`` tells.

1. Each verdict of :func:`onnx_light.onnx.verify_model` (its ``loaders``) agrees with what
   the installed onnx, onnxruntime and onnx-ir do on the same files, over
   the layouts users meet (links inside and out of the folder, hard links,
   a Hugging Face cache snapshot, ``..``, absolute locations, a subgraph's
   tensor).
2. Every writer's output, after every commit path (a new file; a replaced
   one by exchange, by hard link, by rename aside), is regular files with a
   single link, and loads in all three.
"""

from __future__ import annotations

import errno
import json
import os
import shutil

import numpy as np
import onnx
import onnx_ir
import onnxruntime as ort
import pytest
from helpers import (
    make_runnable_model,
    onnxruntime_older_than,
    read_back,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from helpers import run_cli as _cli

import onnx_light.onnx as onnxl
from benchmarks.harness import make_gemm_model, model_inputs
from onnx_light.onnx._commit import atomic as _atomic

LOADERS = ("onnx", "onnxruntime", "onnx-ir")


def loader_verdicts(path) -> tuple[onnxl.LoaderVerdict, ...]:
    """What verify says each loader will do with the model at ``path``."""
    return onnxl.verify_model(path).loaders


def _relocate(path, location: str) -> None:
    """Rewrite every reference of the model at ``path`` to ``location``."""
    model = onnx.load(str(path), load_external_data=False)
    for sub in _all_tensors(model):
        for e in sub.external_data:
            if e.key == "location":
                e.value = location
    onnx.save(model, str(path))


def _all_tensors(model):
    from onnx_light.onnx._read.tensors import iter_tensors

    return [site.tensor for site in iter_tensors(model)]


def _loads(loader: str, path: str) -> bool:
    """Does the installed loader load the model and read every weight?"""
    try:
        if loader == "onnx":
            onnx.load(path)
        elif loader == "onnxruntime":
            options = ort.SessionOptions()
            options.log_severity_level = 3
            ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        else:
            model = onnx_ir.load(path)
            for graph in model.graphs():
                for value in graph.initializers.values():
                    value.const_value.numpy()
                for node in graph:
                    for attr in node.attributes.values():
                        if attr.type == onnx_ir.AttributeType.TENSOR:
                            attr.value.numpy()
    except Exception:  # noqa: BLE001 - each loader raises its own kind; the verdict says why
        return False
    return True


def _model(kind: str):
    return make_gemm_model(2, 64) if kind == "main" else make_runnable_model()


def _layout(root, name: str, kind: str) -> str:
    """Build one layout under ``root``; return the path a user gives the loaders."""
    d = root / name
    d.mkdir()
    model = _model(kind)
    if name in ("hf-both-linked", "hf-model-linked", "data-only-in-physical"):
        blobs, snap = root / "blobs", d / "snap"
        blobs.mkdir()
        snap.mkdir()
        save_two_file(model, blobs / "m.onnx", location="m.onnx.data")
        if name != "data-only-in-physical":
            os.replace(blobs / "m.onnx", blobs / "aaaa")
            os.symlink("../../blobs/aaaa", snap / "m.onnx")
        else:
            os.symlink("../../blobs/m.onnx", snap / "m.onnx")
        if name == "hf-both-linked":
            os.replace(blobs / "m.onnx.data", blobs / "bbbb")
            os.symlink("../../blobs/bbbb", snap / "m.onnx.data")
        elif name == "hf-model-linked":
            os.replace(blobs / "m.onnx.data", snap / "m.onnx.data")
        return str(snap / "m.onnx")
    save_two_file(model, d / "m.onnx", location="m.onnx.data")
    if name == "symlink-inside":
        os.replace(d / "m.onnx.data", d / "real.data")
        os.symlink("real.data", d / "m.onnx.data")
    elif name == "hard-link":
        os.link(d / "m.onnx.data", d / "second.data")
    elif name == "symlink-outside":
        (root / "away").mkdir()
        os.replace(d / "m.onnx.data", root / "away" / "w.data")
        os.symlink(str(root / "away" / "w.data"), d / "m.onnx.data")
    elif name == "symlinked-subfolder":
        (root / "away2").mkdir()
        os.replace(d / "m.onnx.data", root / "away2" / "m.onnx.data")
        os.symlink(str(root / "away2"), d / "sub")
        _relocate(d / "m.onnx", "sub/m.onnx.data")
    elif name == "dot-dot":
        (d / "sub").mkdir()
        os.replace(d / "m.onnx", d / "sub" / "m.onnx")
        _relocate(d / "sub" / "m.onnx", "../m.onnx.data")
        return str(d / "sub" / "m.onnx")
    elif name == "absolute":
        _relocate(d / "m.onnx", str(d / "m.onnx.data"))
    elif name == "subfolder":
        (d / "sub").mkdir()
        os.replace(d / "m.onnx.data", d / "sub" / "m.onnx.data")
        _relocate(d / "m.onnx", "sub/m.onnx.data")
    return str(d / "m.onnx")


LAYOUTS = [
    "plain",
    "subfolder",
    "symlink-inside",
    "hard-link",
    "symlink-outside",
    "symlinked-subfolder",
    "dot-dot",
    "absolute",
    "hf-both-linked",
    "hf-model-linked",
    "data-only-in-physical",
]


@pytest.mark.parametrize("kind", ["main", "subgraph"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_verdict_agrees_with_the_installed_loader(tmp_path, layout, kind):
    """Where the installed onnxruntime predates the rule the verdict states (1.23, the
    newest for Python 3.10), it checks less: what the rule accepts, it loads too."""
    path = _layout(tmp_path, layout, kind)
    verdicts = {v.loader: v for v in loader_verdicts(path)}
    assert list(verdicts) == list(LOADERS)
    for loader in LOADERS:
        actual = _loads(loader, path)
        v = verdicts[loader]
        said = f"{layout} ({kind}): {loader} {'loads' if actual else 'refuses'} it, "
        said += f"the verdict ({v.rule}) says {v.reasons or 'accepts'}"
        if loader == "onnxruntime" and onnxruntime_older_than(v.rule.split(">=")[1]):
            assert actual or not v.accepts, said
        else:
            assert v.accepts == actual, said
        assert bool(v.reasons) != v.accepts


@pytest.mark.parametrize("kind", ["main", "subgraph"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_verify_judges_the_references_it_refuses_too(tmp_path, layout, kind):
    """verify reads each model once and judges the references of that pass, those it
    refuses included: the verdicts are the same whether the model is verified alone
    or among others."""
    path = _layout(tmp_path, layout, kind)
    alone = onnxl.verify_model(path)
    among = onnxl.verify_models([path, path]).models
    assert among[0].loaders == among[1].loaders == alone.loaders
    if layout in ("dot-dot", "absolute", "symlink-outside"):
        assert alone.problems and not alone.valid  # refused by verify
        assert not alone.loadable  # and still judged for each loader


def test_the_measured_rules_hold(tmp_path):
    """The facts the security page states, on the installed versions."""
    snap = _layout(tmp_path, "hf-both-linked", "main")
    v = {x.loader: x for x in loader_verdicts(snap)}
    assert not v["onnx"].accepts and "symbolic link" in v["onnx"].reasons[0]
    assert v["onnxruntime"].accepts
    assert not v["onnx-ir"].accepts  # its data resolves into blobs/, outside the snapshot
    hard = _layout(tmp_path, "hard-link", "main")
    v = {x.loader: x for x in loader_verdicts(hard)}
    assert not v["onnx"].accepts and not v["onnx-ir"].accepts and v["onnxruntime"].accepts


# -- verify says it ---------------------------------------------------------------------


def test_verify_names_the_refusing_loader_and_the_fix(tmp_path, capsys):
    snap = _layout(tmp_path, "hf-both-linked", "main")
    code, out, _ = _cli(capsys, "verify", snap)
    assert code == 0, out
    lines = out.splitlines()
    onnx_line = next(line for line in lines if line.lstrip().startswith("onnx >= 1.21"))
    assert "refuses" in onnx_line and "m.onnx.data is a symbolic link" in onnx_line
    assert any("onnxruntime >= 1.25: accepts" in line for line in lines)
    fix = f"onnx-light align {snap} DIR/m.onnx"
    assert any(fix in line for line in lines), out


def test_verify_json_gives_every_verdict(tmp_path, capsys):
    snap = _layout(tmp_path, "hf-both-linked", "main")
    plain = _layout(tmp_path, "plain", "main")
    code, out, _ = _cli(capsys, "verify", "--json", snap, plain)
    assert code == 0
    doc = json.loads(out)
    first, second = doc["models"]
    assert first["model"] == snap and first["problems"] == []
    by_loader = {v["loader"]: v for v in first["loaders"]}
    assert by_loader["onnx"]["accepts"] is False and by_loader["onnxruntime"]["accepts"] is True
    assert "onnx-light align" in first["fix"]
    assert all(v["accepts"] for v in second["loaders"]) and second["fix"] is None


def test_verify_of_a_plain_model_says_every_loader_accepts(tmp_path, capsys):
    plain = _layout(tmp_path, "plain", "main")
    code, out, _ = _cli(capsys, "verify", plain)
    assert code == 0
    assert out.splitlines() == [
        f"OK {plain}: 2 external tensors, every reference valid "
        "(onnx, onnxruntime and onnx-ir load it)"
    ]


def test_verify_says_onnx_refuses_a_link_on_the_way(tmp_path, capsys):
    """A model whose location goes through a linked folder (``alias/w.data``): ``verify``
    says recent onnx refuses it, and onnx does."""
    (tmp_path / "y").mkdir()
    model = uint8_model(2, 3000)
    onnxl.save(model, tmp_path / "m.onnx", location="y/w.data")
    os.symlink("y", tmp_path / "alias")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for t in meta.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "alias/w.data"
    onnx.save(meta, str(tmp_path / "m.onnx"))
    code, out, _ = _cli(capsys, "verify", tmp_path / "m.onnx")
    assert code == 0
    assert "onnx >= 1.21: refuses: alias/w.data goes through a symbolic link (alias)" in out
    try:
        onnx.load(str(tmp_path / "m.onnx"))
        loaded = True
    except Exception:  # noqa: BLE001 - onnx's checker error
        loaded = False
    assert not loaded


# -- what we write loads in all three -------------------------------------------------------


def _single_links(folder) -> None:
    for name in os.listdir(folder):
        st = os.lstat(os.path.join(folder, name))
        assert not os.path.islink(os.path.join(folder, name)), name
        assert st.st_nlink == 1, f"{name} has {st.st_nlink} links"


def _all_loaders_load(path) -> None:
    for loader in LOADERS:
        assert _loads(loader, str(path)), f"{loader} refuses {path}"
    assert all(v.accepts for v in loader_verdicts(path))


def _write(how: str, src, dst) -> None:
    if how == "save":
        onnxl.save(onnxl.load(src), dst, location=os.path.basename(dst) + ".data")
    elif how == "align":
        onnxl.align_external_data_streaming(src, dst, alignment=4096)
    elif how == "dedup":
        onnxl.deduplicate_external_data([src], [dst], os.path.basename(dst) + ".data")
    elif how == "save_edited":
        onnxl.save_edited(onnxl.load(src, load_external_data=False), src, dst)
    elif how == "shared":
        meta = onnxl.load(src, load_external_data=False)
        meta.graph.initializer.append(
            onnxl.numpy_helper.from_array(np.ones(2048, np.float32), "extra")
        )
        onnxl.save_model_with_shared_external_data(meta, dst)


WRITERS = ["save", "align", "dedup", "save_edited", "shared"]
COMMITS = ["new", "exchange", "hard-link", "rename-aside"]


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("how", WRITERS)
def test_every_output_loads_in_every_loader(tmp_path, monkeypatch, how, commit):
    """No output is a link or has a second link, after any commit path."""
    model = make_gemm_model(3, 64)
    folder = tmp_path / "m"
    folder.mkdir()
    src = folder / "m.onnx"
    save_two_file(model, src)
    in_place = commit != "new" and how in ("save", "align", "dedup")
    dst = src if in_place else folder / "out.onnx"
    if commit != "new" and not in_place:  # the commit replaces files that exist
        save_two_file(model, dst, location="out.onnx.data")
    if commit in ("hard-link", "rename-aside"):
        monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    if commit == "rename-aside":

        def no_link(*args, **kwargs):
            raise OSError(errno.EPERM, "no hard links here")

        monkeypatch.setattr(_atomic.os, "link", no_link)
    _write(how, src, dst)
    monkeypatch.undo()
    _single_links(folder)
    _all_loaders_load(dst)
    got = read_back(dst)
    assert {k: v for k, v in got.items() if k in tensor_bytes(model)} == tensor_bytes(model)
    session = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    feeds = model_inputs(64)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in zip(session.run(None, feeds), reference.run(None, feeds), strict=True):
        assert a.tobytes() == b.tobytes()


def test_an_interrupted_commit_leaves_single_links(tmp_path, monkeypatch):
    """A rename that fails midway (hard-link fallback): the undo leaves the old files,
    each with one link, loading in every loader."""
    model = make_gemm_model(3, 64)
    src = tmp_path / "m.onnx"
    save_two_file(model, src)
    monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    real_replace = os.replace
    calls = []

    def failing_replace(a, b, *args, **kwargs):
        calls.append(b)
        if str(b).endswith(".onnx") and len(calls) > 1:
            raise OSError(errno.EIO, "injected")
        return real_replace(a, b, *args, **kwargs)

    monkeypatch.setattr(_atomic.os, "replace", failing_replace)
    with pytest.raises(OSError, match="injected"):
        onnxl.align_external_data_streaming(src, src, alignment=65536)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]
    _single_links(tmp_path)
    _all_loaders_load(src)
    assert read_back(src) == tensor_bytes(model)


def test_a_hugging_face_snapshot_aligned_out_loads_everywhere(tmp_path, capsys):
    """The fix verify prints, run: a copy every loader accepts."""
    snap = _layout(tmp_path, "hf-both-linked", "main")
    out = tmp_path / "mine"
    out.mkdir()
    code, _, err = _cli(capsys, "align", snap, out / "m.onnx")
    assert code == 0, err
    _single_links(out)
    _all_loaders_load(out / "m.onnx")
    shutil.rmtree(tmp_path / "blobs")  # the copy stands alone
    _all_loaders_load(out / "m.onnx")
