"""Other readers are found by the files they read, not by the names they use.

``m/a.onnx`` stores its weights in ``a.onnx.data``; ``m/link.data`` is a
symbolic link to it, or a second hard link; ``m/c.onnx`` is a copy of
``a.onnx`` whose references say ``link.data``. onnx-light's ``load``,
``verify`` and onnxruntime read ``c.onnx`` through a symbolic link, so an
in-place rewrite of ``a.onnx`` must never replace ``a.onnx.data``, and no
prune may delete it, through the API or the command line. A data file with
two hard links is refused as a source (as onnx refuses it) before anything is
written; a destination that is a hard link of a file another model reads is
refused too.

The other models of the folder are found as the file system finds them: a
reference spelled in another case reads the file where the folder folds case
(two names that match once folded name neither for certain), a reference into a
folder that does not exist reads nothing, and a model that cannot be read does
not hide the readers after it nor stop a replacement alone. What a prune keeps
is in ``test_prune.py``.
"""

from __future__ import annotations

import os
import re

import onnx
import pytest
from helpers import (
    assert_clean_failure,
    folder_digest,
    read_back,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from helpers import run_cli as _cli

import onnx_light.onnx as onnxl

LINKS = ["symlink", "hardlink"]


@pytest.fixture(params=LINKS)
def folder(request, tmp_path):
    """``(folder, the tensors' bytes, the kind of link)``: a.onnx, a.onnx.data, link.data
    and c.onnx.

    With a hard link, every call below is refused before it writes (the
    source's data file has two links): ``_refused`` and ``_prune`` expect that."""
    m = tmp_path / "m"
    m.mkdir()
    model = uint8_model(2, 6000)
    save_two_file(model, m / "a.onnx", size_threshold=0)
    if request.param == "symlink":
        os.symlink("a.onnx.data", m / "link.data")
    else:
        os.link(m / "a.onnx.data", m / "link.data")
    view = onnx.load(str(m / "a.onnx"), load_external_data=False)
    for t in view.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "link.data"
    onnx.save(view, str(m / "c.onnx"))
    expected = tensor_bytes(model)
    assert read_back(m / "c.onnx") == expected
    return m, expected, request.param


def _refused(kind: str) -> str:
    """What the refusal says: another reader, or (hard link) the source's two links."""
    return "c.onnx.*another model of the folder" if kind == "symlink" else "has 2 hard links"


def _c_still_reads(m, expected) -> None:
    """c.onnx reads the bytes it read before (plain reads: onnx-light refuses the hard link)."""
    assert read_back(m / "c.onnx") == expected
    assert (m / "a.onnx.data").exists()


# -- replacing the file another model reads through a link: refused -----------------------


def test_align_in_place_refuses(folder):
    m, expected, kind = folder
    before = folder_digest(m)
    with pytest.raises(onnxl.ExternalDataError, match=_refused(kind)):
        onnxl.align_external_data_streaming(
            m / "a.onnx", m / "a.onnx", "a.onnx.data", alignment=65536
        )
    assert folder_digest(m) == before
    _c_still_reads(m, expected)


def test_cli_align_in_place_refuses(folder, capsys):
    m, expected, kind = folder
    before = folder_digest(m)
    code, _, err = _cli(capsys, "align", m / "a.onnx", m / "a.onnx", "--weights", "a.onnx.data")
    assert_clean_failure(code, err)
    assert re.search(_refused(kind), err), err
    assert folder_digest(m) == before
    _c_still_reads(m, expected)


def test_save_in_place_refuses(folder):
    m, expected, kind = folder
    before = folder_digest(m)
    meta = onnxl.load(m / "a.onnx", load_external_data=False)
    with pytest.raises(onnxl.ExternalDataError, match=_refused(kind)):
        onnxl.save(meta, m / "a.onnx", location="a.onnx.data")
    assert folder_digest(m) == before
    _c_still_reads(m, expected)


def test_dedup_in_place_over_the_linked_file_refuses(folder):
    m, expected, kind = folder
    before = folder_digest(m)
    with pytest.raises(onnxl.ExternalDataError, match=_refused(kind).split(".*")[0]):
        onnxl.deduplicate_external_data([m / "a.onnx"], [m / "a.onnx"], "a.onnx.data")
    assert folder_digest(m) == before
    _c_still_reads(m, expected)


# -- pruning the file another model reads through a link: kept -----------------------------


def _prune(folder, call) -> None:
    """Run ``call()``: with a symlink it keeps a.onnx.data; with a hard link it is refused."""
    m, expected, kind = folder
    before = folder_digest(m)
    if kind == "hardlink":
        with pytest.raises((onnxl.ExternalDataError, SystemExit, AssertionError), match="2 hard"):
            call()
        assert folder_digest(m) == before
    else:
        call()
        assert read_back(m / "a.onnx") == expected
    _c_still_reads(m, expected)


def test_dedup_in_place_prune_keeps_it(folder):
    m = folder[0]

    def call():
        result = onnxl.deduplicate_external_data(
            [m / "a.onnx"],
            [m / "a.onnx"],
            "w.data",
            options=onnxl.WriteOptions(remove_unreferenced=True),
        )
        assert result.removed == [] and str(m / "a.onnx.data") not in result.unreferenced

    _prune(folder, call)


def test_align_in_place_prune_keeps_it(folder):
    m = folder[0]

    def call():
        result = onnxl.align_external_data_streaming(
            m / "a.onnx",
            m / "a.onnx",
            "new.data",
            options=onnxl.WriteOptions(remove_unreferenced=True),
        )
        assert result.removed == [] and result.unreferenced == []

    _prune(folder, call)


@pytest.mark.parametrize(
    "args",
    [
        ["dedup", "a.onnx", "--in-place", "--weights", "w.data", "--prune"],
        ["align", "a.onnx", "a.onnx", "--weights", "new.data", "--prune"],
    ],
)
def test_cli_prune_keeps_it(folder, capsys, args):
    m = folder[0]

    def call():
        code, _, err = _cli(capsys, *[m / a if a.endswith(".onnx") else a for a in args])
        assert code == 0, err

    _prune(folder, call)


def test_without_the_other_reader_the_old_file_is_pruned(tmp_path):
    """The rule is not a blanket refusal: with no other reader, the old file goes."""
    model = uint8_model(2, 6000)
    save_two_file(model, tmp_path / "a.onnx", size_threshold=0)
    result = onnxl.align_external_data_streaming(
        tmp_path / "a.onnx",
        tmp_path / "a.onnx",
        "new.data",
        options=onnxl.WriteOptions(remove_unreferenced=True),
    )
    assert result.removed == [str(tmp_path / "a.onnx.data")]
    assert not (tmp_path / "a.onnx.data").exists()
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


# -- a destination that is a hard link of a file another model reads: refused -------------


@pytest.mark.parametrize("how", ["align", "save", "dedup", "cli-align", "cli-dedup"])
def test_destination_hard_linked_to_what_another_model_reads(tmp_path, capsys, how):
    """``w.data`` is a second name of ``other.data``, which ``b.onnx`` reads: writing
    a.onnx's new weights as ``w.data`` would replace a file b.onnx reads."""
    m = tmp_path / "m"
    m.mkdir()
    save_two_file(uint8_model(2, 6000), m / "a.onnx", size_threshold=0)
    other = uint8_model(2, 3000, seed=1, prefix="B")
    save_two_file(other, m / "b.onnx", location="other.data", size_threshold=0)
    os.link(m / "other.data", m / "w.data")
    before = folder_digest(m)
    a = m / "a.onnx"
    if how.startswith("cli"):
        verb = ["align", a, a] if how == "cli-align" else ["dedup", a, "--in-place"]
        code, _, err = _cli(capsys, *verb, "--weights", "w.data")
        assert_clean_failure(code, err)
        assert "b.onnx" in err
    else:
        with pytest.raises(onnxl.ExternalDataError, match="b.onnx"):
            if how == "align":
                onnxl.align_external_data_streaming(a, a, "w.data")
            elif how == "save":
                onnxl.save(onnxl.load(a, load_external_data=False), a, location="w.data")
            else:
                onnxl.deduplicate_external_data([a], [a], "w.data")
    assert folder_digest(m) == before
    assert read_back(m / "b.onnx") == tensor_bytes(other)


@pytest.mark.parametrize("how", ["align", "cli"])
def test_in_place_never_replaces_another_model_it_reads(tmp_path, capsys, how):
    """A view saved from a skip_raw_data load reads base.onnx's inline bytes; re-aligning
    the view in place with base.onnx as its weights name used to overwrite base.onnx."""
    from helpers import make_runnable_model

    onnxl.save(make_runnable_model(seed=2), tmp_path / "base.onnx")
    view = onnxl.load(tmp_path / "base.onnx", load_external_data=False, skip_raw_data=True)
    onnxl.save(view, tmp_path / "view.onnx")
    before = folder_digest(tmp_path)
    v = tmp_path / "view.onnx"
    if how == "align":
        with pytest.raises(onnxl.ExternalDataError, match="base.onnx.*never replaced"):
            onnxl.align_external_data_streaming(v, v, "base.onnx")
    else:
        code, _, err = _cli(capsys, "align", v, v, "--weights", "base.onnx")
        assert_clean_failure(code, err)
        assert "never replaced" in err
    assert folder_digest(tmp_path) == before
    assert onnxl.load(tmp_path / "base.onnx") is not None
    # and with the default name, in place: the view gets its own weights file
    onnxl.align_external_data_streaming(v, v, options=onnxl.WriteOptions(remove_unreferenced=True))
    assert sorted(os.listdir(tmp_path)) == ["base.onnx", "view.onnx", "view.onnx.data"]
    assert folder_digest(tmp_path)["base.onnx"] == before["base.onnx"]


# -- the other models of the folder, as the rules find them ----------------------------


def _two_file(folder, name="m.onnx"):
    """``folder/name`` + ``name.data`` (two uint8 tensors, saved by onnx); its tensors' bytes."""
    model = uint8_model(2, 3000)
    save_two_file(model, folder / name, size_threshold=0)
    return folder / name, tensor_bytes(model)


def _reader(folder, src, name, location) -> None:
    """``folder/name``: a copy of the model ``src`` whose references all say ``location``."""
    view = onnx.load(str(src), load_external_data=False)
    for t in view.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save(view, str(folder / name))


def _not_a_model(path) -> None:
    path.write_bytes(b"\xff\xff\xff\xff not a protobuf")


# -- a reference spelled in another case --------------------------------------------------


def test_a_reference_differing_only_in_case_counts_as_a_reader(tmp_path, monkeypatch):
    """b.onnx records ``M.ONNX.DATA``; the folder holds one name that matches it once case
    is folded, ``m.onnx.data``: on a filesystem that folds case b.onnx reads it, so an
    in-place align of m.onnx over it is refused naming b.onnx, and nothing changes.
    (The current folder is elsewhere: the folder listed is the file's.)"""
    m = tmp_path / "m"
    m.mkdir()
    path, expected = _two_file(m)
    _reader(m, path, "b.onnx", "M.ONNX.DATA")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "M.ONNX.DATA").write_bytes(b"decoy")  # a cwd listing would keep the case
    monkeypatch.chdir(elsewhere)
    before = folder_digest(m)
    with pytest.raises(onnxl.ExternalDataError) as info:
        onnxl.align_external_data_streaming(path, path, "m.onnx.data", alignment=64)
    assert str(info.value) == (
        f"destination '{m / 'm.onnx.data'}' is read by '{m / 'b.onnx'}', another model of the "
        "folder: replacing it would break that model; write the new files under other names "
        "(the old ones stay for it)"
    )
    assert folder_digest(m) == before
    assert read_back(path) == expected


def test_two_names_matching_in_folded_case_name_neither(tmp_path):
    """With both ``m.onnx.data`` and ``M.onnx.data`` in the folder, ``M.ONNX.DATA`` names
    neither for certain: b.onnx is not a reader of m.onnx.data, and the align goes on."""
    path, expected = _two_file(tmp_path)
    (tmp_path / "M.onnx.data").write_bytes(b"another file")
    if len(os.listdir(tmp_path)) != 3:
        pytest.skip("this filesystem folds case: the two names are one file")
    _reader(tmp_path, path, "b.onnx", "M.ONNX.DATA")
    onnxl.align_external_data_streaming(path, path, "m.onnx.data", alignment=64)
    assert read_back(path) == expected


# -- a reference into a folder that does not exist ----------------------------------------


def test_a_reader_whose_reference_folder_is_missing_does_not_stop_the_call(tmp_path):
    """b.onnx references ``gone/w.data`` (no ``gone/`` folder): it reads nothing of the
    folder, so replacing m.onnx.data in place goes on and writes the same values."""
    path, expected = _two_file(tmp_path)
    _reader(tmp_path, path, "b.onnx", "gone/w.data")
    result = onnxl.align_external_data_streaming(path, path, "m.onnx.data", alignment=64)
    assert result.weights_paths == [str(tmp_path / "m.onnx.data")]
    assert read_back(path) == expected


# -- a model that cannot be read ----------------------------------------------------------


def test_a_reader_after_an_unreadable_model_is_still_found(tmp_path):
    """a.onnx is not a model; b.onnx (listed after it) reads m.onnx.data: the refusal
    still names b.onnx, and the folder is unchanged."""
    path, expected = _two_file(tmp_path)
    _not_a_model(tmp_path / "a.onnx")
    _reader(tmp_path, path, "b.onnx", "m.onnx.data")
    before = folder_digest(tmp_path)
    with pytest.raises(onnxl.ExternalDataError, match="is read by '.*b.onnx', another model"):
        onnxl.align_external_data_streaming(path, path, "m.onnx.data", alignment=64)
    assert folder_digest(tmp_path) == before


def test_an_unreadable_model_alone_does_not_stop_a_replacement(tmp_path):
    """a.onnx is not a model and reads nothing: an in-place align over m.onnx.data works."""
    path, expected = _two_file(tmp_path)
    _not_a_model(tmp_path / "a.onnx")
    onnxl.align_external_data_streaming(path, path, "m.onnx.data", alignment=64)
    assert read_back(path) == expected
