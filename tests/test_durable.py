"""Durable commits: new files flushed before they are renamed, the folder after.

Each call runs in a fresh interpreter under ``strace -f -y`` (which prints
the path behind each descriptor); the trace of ``fsync``, renames and
unlinks must show, for a call that replaces files (in place) or one made
``durable=True``:

1. every temporary file flushed (``fsync``) before the rename that gives it
   its final name;
2. the destination folder flushed after the last rename;
3. the replaced files' leftovers removed only after that;

and, for new files in a new folder without ``durable``, no ``fsync`` at all
(the default costs nothing there).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from helpers import read_back, save_two_file, uint8_model

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")

_CALL = re.compile(r"^\d+\s+(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+)")
_PATH = re.compile(r'"([^"]*)"|<([^>]*)>')


def _trace(tmp_path, code: str) -> list[tuple[str, list[str]]]:
    """``(syscall, paths)`` of each successful fsync, rename and unlink the code made."""
    log = tmp_path / "strace.log"
    done = subprocess.run(
        [
            "strace",
            "-f",
            "-y",
            "-qq",
            "-o",
            str(log),
            "-e",
            "trace=fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat",
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    calls = []
    for line in log.read_text().splitlines():
        m = _CALL.match(line)
        if m and int(m["ret"]) == 0:
            paths = [a or b for a, b in _PATH.findall(m["args"])]
            calls.append((m["name"], paths))
    return calls


def _check_order(calls, folder: str) -> None:
    renames = [i for i, (name, _) in enumerate(calls) if name.startswith("rename")]
    assert renames, "no rename: nothing was committed"
    flushed = {}
    for i, (name, paths) in enumerate(calls):
        if name in ("fsync", "fdatasync"):
            flushed.setdefault(paths[0], i)
    for i in renames:
        name, paths = calls[i]
        tmp = next(p for p in paths if p.endswith(".onnx-light-tmp"))
        assert tmp in flushed and flushed[tmp] < i, f"{tmp} renamed before it was flushed"
    folder_sync = [
        i for i, (name, paths) in enumerate(calls) if name == "fsync" and paths[0] == folder
    ]
    assert folder_sync and folder_sync[-1] > renames[-1], (
        "the folder is not flushed after the renames"
    )
    for i, (name, paths) in enumerate(calls):
        if name.startswith("unlink") and any("onnx-light" in p for p in paths) and i > renames[0]:
            assert i > folder_sync[-1], f"{paths} removed before the folder was flushed"


def _model(folder):
    folder.mkdir()
    model = uint8_model(4, 6000)
    save_two_file(model, folder / "m.onnx", size_threshold=0)
    return read_back(folder / "m.onnx")


def test_in_place_re_align_flushes_before_renaming_and_the_folder_after(tmp_path):
    expected = _model(tmp_path / "m")
    src = tmp_path / "m" / "m.onnx"
    code = (
        "import onnx_light.onnx as o\n"
        f"o.align_external_data_streaming({str(src)!r}, {str(src)!r}, 'm.onnx.data')\n"
    )
    calls = _trace(tmp_path, code)
    _check_order(calls, str((tmp_path / "m").resolve()))
    assert read_back(src) == expected


def test_new_files_are_not_flushed_unless_durable(tmp_path):
    expected = _model(tmp_path / "m")
    (tmp_path / "out").mkdir()
    src, dst = tmp_path / "m" / "m.onnx", tmp_path / "out" / "a.onnx"
    plain = _trace(
        tmp_path,
        f"import onnx_light.onnx as o\no.align_external_data_streaming({str(src)!r}, {str(dst)!r})\n",
    )
    assert not [c for c in plain if c[0] in ("fsync", "fdatasync")]
    assert read_back(dst) == expected
    dst2 = tmp_path / "out" / "b.onnx"
    durable = _trace(
        tmp_path,
        "import onnx_light.onnx as o\n"
        f"o.align_external_data_streaming({str(src)!r}, {str(dst2)!r}, "
        "options=o.WriteOptions(durable=True))\n",
    )
    _check_order(durable, str((tmp_path / "out").resolve()))
    assert read_back(dst2) == expected


def test_save_and_dedup_follow_the_same_order(tmp_path):
    expected = _model(tmp_path / "m")
    src = tmp_path / "m" / "m.onnx"
    save = _trace(
        tmp_path,
        "import onnx_light.onnx as o\n"
        f"m = o.load({str(src)!r})\n"
        f"o.save(m, {str(src)!r}, location='m.onnx.data', options=o.SerializeOptions(alignment=4096))\n",
    )
    _check_order(save, str((tmp_path / "m").resolve()))
    assert read_back(src) == expected
    dedup = _trace(
        tmp_path,
        "import onnx_light.onnx as o\n"
        f"o.deduplicate_external_data([{str(src)!r}], [{str(src)!r}], 'w.data')\n",
    )
    _check_order(dedup, str((tmp_path / "m").resolve()))
    assert read_back(src) == expected


def test_the_command_line_flag_makes_a_new_folder_durable(tmp_path):
    expected = _model(tmp_path / "m")
    (tmp_path / "out").mkdir()
    src, dst = tmp_path / "m" / "m.onnx", tmp_path / "out" / "m.onnx"
    code = (
        "import sys\nfrom onnx_light.cli import main\n"
        f"sys.exit(main(['align', {str(src)!r}, {str(dst)!r}, '--durable', '-q']))\n"
    )
    _check_order(_trace(tmp_path, code), str((tmp_path / "out").resolve()))
    assert read_back(dst) == expected


_WRITERS = {
    "save": "o.save(o.load(SRC), DST, location='a.data', options=OPTS)",
    "SerializeToFile": "o.load(SRC).SerializeToFile(DST, OPTS, 'a.data')",
    "align": "o.align_external_data_streaming(SRC, DST, options=OPTS)",
    "dedup": "o.deduplicate_external_data([SRC], [DST], 'w.data', options=OPTS)",
    "save_edited": "o.save_edited(o.load(SRC, load_external_data=False), SRC, DST, options=OPTS)",
    "shared save": "m = o.load(SRC, load_external_data=False)\n"
    "m.graph.initializer.append(o.numpy_helper.from_array(np.ones(4096, np.float32), 'new'))\n"
    "o.save_model_with_shared_external_data(m, VARIANT, options=OPTS)",
}


@pytest.mark.parametrize("durable", [True, False])
@pytest.mark.parametrize("writer", sorted(_WRITERS))
def test_every_writer_honours_durable(tmp_path, writer, durable):
    """New files that replace nothing: flushed in order with ``durable``, never without.

    The shared save used to rebuild its options and drop ``durable``."""
    expected = _model(tmp_path / "m")
    (tmp_path / "out").mkdir()
    src, dst = tmp_path / "m" / "m.onnx", tmp_path / "out" / "a.onnx"
    variant = tmp_path / "m" / "variant.onnx"
    code = (
        "import numpy as np\nimport onnx_light.onnx as o\n"
        f"SRC, DST, VARIANT = {str(src)!r}, {str(dst)!r}, {str(variant)!r}\n"
        f"OPTS = o.SerializeOptions(durable={durable})\n" + _WRITERS[writer] + "\n"
    )
    calls = _trace(tmp_path, code)
    written = variant if writer == "shared save" else dst
    if durable:
        _check_order(calls, str(written.parent.resolve()))
    else:
        assert not [c for c in calls if c[0] in ("fsync", "fdatasync")], calls
    got = read_back(written)
    assert {k: v for k, v in got.items() if k in expected} == expected
