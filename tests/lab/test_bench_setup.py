"""What the gallery scripts set up with ``benchmarks.harness``: sizes, folders, places, bars, the CLI."""

from __future__ import annotations

import json
import os
import subprocess

import matplotlib
import onnx
import pytest

from benchmarks.harness import (
    default_rounds,
    empty_folder,
    file_digests,
    make_gemm_model,
    median_bars,
    mib_on_disk,
    quick_run,
    show_command,
    sized,
    tensor_places,
)

matplotlib.use("Agg")

MiB = 2**20


def _two_files(folder, n=2, dim=64) -> str:
    path = os.path.join(folder, "model.onnx")
    onnx.save(make_gemm_model(n, dim), path, save_as_external_data=True, location="model.onnx.data")
    return path


def test_sizes_are_the_full_ones_unless_a_quick_run_is_asked_for(monkeypatch):
    monkeypatch.delenv("UNITTEST_GOING", raising=False)
    assert not quick_run()
    assert sized((24, 1024), quick=(8, 256)) == (24, 1024)
    assert default_rounds() == 5
    monkeypatch.setenv("UNITTEST_GOING", "1")
    assert quick_run()
    assert sized((24, 1024), quick=(8, 256)) == (8, 256)
    assert default_rounds() == 1
    monkeypatch.setenv("UNITTEST_GOING", "0")
    assert sized(3, quick=1) == 3


def test_empty_folder_leaves_only_what_it_keeps(tmp_path):
    out = str(tmp_path / "out")
    assert empty_folder(out) == out and os.listdir(out) == []  # created
    for name in ("first.onnx", "first.onnx.data", "variant.onnx", "variant.onnx.data"):
        (tmp_path / "out" / name).write_bytes(b"x" * 10)
    (tmp_path / "out" / "sub").mkdir()
    (tmp_path / "out" / "sub" / "f").write_bytes(b"y")
    empty_folder(out, keep={"first.onnx", "first.onnx.data"})
    assert sorted(os.listdir(out)) == ["first.onnx", "first.onnx.data"]
    empty_folder(out)
    assert os.listdir(out) == []


def test_empty_folder_removes_a_link_not_what_it_points_to(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_bytes(b"keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "link").symlink_to(elsewhere, target_is_directory=True)
    (out / "file_link").symlink_to(elsewhere / "precious")
    empty_folder(str(out))
    assert os.listdir(out) == []
    assert (elsewhere / "precious").read_bytes() == b"keep me"


def test_empty_folder_refuses_a_file(tmp_path):
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(OSError):
        empty_folder(str(tmp_path / "f"))


def test_mib_on_disk_counts_files_and_folders_and_nothing_for_a_missing_one(tmp_path):
    (tmp_path / "a").write_bytes(b"\0" * MiB)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"\0" * (MiB // 2))
    (tmp_path / "d" / "e").mkdir()
    (tmp_path / "d" / "e" / "c").write_bytes(b"\0" * (MiB // 4))
    assert mib_on_disk(str(tmp_path / "a")) == 1.0
    assert mib_on_disk(str(tmp_path / "d")) == 0.75
    assert mib_on_disk(str(tmp_path / "a"), str(tmp_path / "d"), str(tmp_path / "none")) == 1.75
    assert mib_on_disk(str(tmp_path / "none")) == 0.0


def test_file_digests_change_when_one_byte_does(tmp_path):
    path = _two_files(str(tmp_path))
    before = file_digests(str(tmp_path))
    assert sorted(before) == ["model.onnx", "model.onnx.data"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "other").write_bytes(b"new")
    assert file_digests(str(tmp_path), before) == before  # only the files named
    assert set(file_digests(str(tmp_path))) == {"model.onnx", "model.onnx.data", "other"}
    with open(path + ".data", "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    after = file_digests(str(tmp_path), before)
    assert after["model.onnx"] == before["model.onnx"]
    assert after["model.onnx.data"] != before["model.onnx.data"]


def test_tensor_places_point_at_each_weights_bytes(tmp_path):
    path = _two_files(str(tmp_path), n=3, dim=64)  # biases of 256 bytes: onnx keeps them inline
    places = tensor_places(path)
    assert list(places.columns) == ["name", "location", "offset", "length"]
    assert list(places["name"]) == ["W0", "W1", "W2"]
    assert set(places["location"]) == {"model.onnx.data"}
    data = (tmp_path / "model.onnx.data").read_bytes()
    weights = {t.name: t for t in make_gemm_model(3, 64).graph.initializer}  # the same seed
    for place in places.itertuples():
        expected = onnx.numpy_helper.to_array(weights[place.name]).tobytes()
        assert data[place.offset : place.offset + place.length] == expected, place.name


def test_tensor_places_of_a_single_file_and_of_a_reference_without_length(tmp_path):
    inline = str(tmp_path / "inline.onnx")
    onnx.save(make_gemm_model(2, 64), inline)
    assert len(tensor_places(inline)) == 0
    path = _two_files(str(tmp_path), n=1, dim=64)
    model = onnx.load(path, load_external_data=False)
    w0 = model.graph.initializer[0]
    kept = [e for e in w0.external_data if e.key != "length"]
    del w0.external_data[:]
    w0.external_data.extend(kept)
    onnx.save(model, path)
    places = tensor_places(path).set_index("name")
    assert places.loc["W0", "length"] == 64 * 64 * 4


def test_median_bars_are_medians_with_their_min_max(tmp_path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    rounds = {"streaming": [1.0, 2.0, 9.0], "in memory (load + save)": [4.0, 5.0, 6.0]}
    bars = median_bars(ax, rounds, "s", "wall time")
    assert [b.get_height() for b in bars] == [2.0, 5.0]
    assert [t.get_text() for t in ax.texts] == ["2 s", "5 s"]
    assert [t.xy[1] for t in ax.texts] == [9.0, 6.0]  # above the slowest round: not hidden
    assert ax.get_ylim()[1] > 9.0
    assert ax.get_title() == "wall time"
    low, high = (line.get_ydata() for line in bars.errorbar.lines[1])  # the caps
    assert list(low) == [1.0, 4.0] and list(high) == [9.0, 6.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "streaming",
        "in memory (load +\nsave)",
    ]
    median_bars(ax, {"shared (onnx-light)": [1.0]}, "MiB", "written")
    assert ax.get_xticklabels()[-1].get_text() == "shared\n(onnx-light)"  # names kept whole
    median_bars(ax, {"onnx-ir DeduplicateInitializersPass": [1.0]}, "s", "wall time")
    assert ax.get_xticklabels()[-1].get_text() == "onnx-ir\nDeduplicateInitializersPass"
    with pytest.raises(ValueError, match="one value"):
        median_bars(ax, {"nothing": []}, "s", "wall time")
    plt.close(fig)


def test_show_command_prints_what_a_reader_would_see(tmp_path, capsys):
    _two_files(str(tmp_path))
    said = show_command("info", "model.onnx", "--json", cwd=str(tmp_path))
    printed = capsys.readouterr().out
    assert printed.startswith("$ onnx-light info model.onnx --json\n")
    assert str(tmp_path) not in printed
    assert json.loads(said)["model"] == "model.onnx"

    show_command("info", "model.onnx", "--json", lines=3, cwd=str(tmp_path))
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 1 + 3 + 1
    assert shown[-1].startswith("... (") and shown[-1].endswith(" more lines)")


def test_show_command_checks_the_exit_code(tmp_path, capsys):
    path = _two_files(str(tmp_path))
    os.truncate(path + ".data", 100)
    said = show_command("verify", "model.onnx", expect=1, cwd=str(tmp_path))
    printed = capsys.readouterr().out
    assert printed.startswith("$ onnx-light verify model.onnx   # exit code 1\n")
    assert "past the end of the file" in said
    with pytest.raises(subprocess.CalledProcessError) as failed:
        show_command("verify", "model.onnx", cwd=str(tmp_path))
    assert failed.value.returncode == 1
    assert "past the end of the file" in capsys.readouterr().out  # said before it raised
