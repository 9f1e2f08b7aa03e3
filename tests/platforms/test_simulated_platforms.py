"""onnx-light on a simulated Windows and macOS (``simulated/platform_simulation.py``).

Each test runs a child Python with the simulation on its ``PYTHONPATH``: the
package imports, the command line answers, every verb writes the same bytes
as on Linux, and Windows's sharing rules hold at the commit. ``.ci/run`` also
runs the writers' tests under each simulation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SIMULATED = os.path.join(HERE, "simulated")
ROOT = os.path.dirname(os.path.dirname(HERE))
PLATFORMS = ["windows", "windows-fat", "macos"]


def _run(platform: str | None, *args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ONNX_LIGHT_SIMULATE",)}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (SIMULATED if platform else "", ROOT, env.get("PYTHONPATH", "")) if p
    )
    if platform:
        env["ONNX_LIGHT_SIMULATE"] = platform
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _python(platform: str, code: str, cwd=None) -> subprocess.CompletedProcess:
    return _run(platform, "-c", textwrap.dedent(code), cwd=cwd)


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_simulation_takes_away_what_the_platform_lacks(platform):
    """The package's modules see the platform (the simulation is in force), the rest Linux."""
    done = _python(
        platform,
        """
        import os
        from onnx_light.onnx._system import files
        from onnx_light.onnx._commit import atomic
        seen = files.os
        print(hasattr(seen, "pread"), hasattr(seen, "O_DIRECTORY"), hasattr(seen, "O_BINARY"),
              hasattr(seen, "copy_file_range"), hasattr(os, "pread"))
        """,
    )
    assert done.returncode == 0, done.stderr
    windows = platform.startswith("windows")
    assert done.stdout.split() == [
        str(not windows),
        str(not windows),
        str(windows),
        "False",
        "True",
    ]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_the_package_imports_and_the_command_line_answers(platform):
    done = _python(platform, "import onnx_light.onnx, onnx_light.cli; print('ok')")
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
    done = _run(platform, "-m", "onnx_light", "--help")
    assert done.returncode == 0, done.stderr
    assert "align" in done.stdout and "dedup" in done.stdout


@pytest.fixture(scope="module")
def on_linux(tmp_path_factory):
    """What every verb leaves on Linux (the reference)."""
    folder = tmp_path_factory.mktemp("linux") / "run"
    done = _run(None, os.path.join(HERE, "scenario.py"), str(folder))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert all(code == 0 for code in result["codes"].values()), result["codes"]
    return result


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_verb_writes_the_bytes_it_writes_on_linux(platform, on_linux, tmp_path):
    """align (aligned, sharded, durable, inline, in place), dedup (to a folder, in place),
    convert (to a folder, in place), verify and info: the same exit codes, the same
    files, byte for byte; in place included under Windows's sharing rules."""
    done = _run(platform, os.path.join(HERE, "scenario.py"), str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["codes"] == on_linux["codes"]
    assert result["files"] == on_linux["files"]


_IN_PLACE = """
    import hashlib, mmap, os, sys
    import numpy as np, onnx
    from onnx import helper, numpy_helper, TensorProto
    import onnx_light.onnx as onnxl

    W = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "W")
    B = numpy_helper.from_array(np.arange(64, dtype=np.float32), "B")  # moves when aligned
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "B"], ["h"]), helper.make_node("Add", ["h", "W"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], [B, W])
    onnx.save(helper.make_model(graph), "m.onnx", save_as_external_data=True,
              location="m.onnx.data", size_threshold=0)

    def state():
        return {n: (hashlib.sha256(open(n, "rb").read()).hexdigest(), os.stat(n).st_nlink)
                for n in sorted(os.listdir("."))}

    before = state()
    fd = os.open("m.onnx.data", os.O_RDONLY)
    held = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)  # as an onnxruntime session maps it
    os.close(fd)
    try:
        onnxl.align_external_data_streaming("m.onnx", "m.onnx", alignment=65536)
    except PermissionError as e:
        print("refused:", e)
    else:
        print("replaced")
    print("unchanged" if state() == before else f"changed: {before} -> {state()}")
    held.close()
    onnxl.align_external_data_streaming("m.onnx", "m.onnx", alignment=65536)
    after = state()
    print("aligned" if sorted(after) == ["m.onnx", "m.onnx.data"] and after != before
          and all(links == 1 for _, links in after.values()) else f"not aligned: {after}")
"""


@pytest.mark.parametrize("platform", ["windows", "windows-fat"])
def test_in_place_align_with_the_weights_mapped_fails_cleanly_on_windows(platform, tmp_path):
    """Windows: another mapping of the weights refuses the commit, which names the file
    and leaves the old pair whole, each file with one link, nothing else in the folder;
    once the mapping is closed, the same in-place align succeeds."""
    done = _python(platform, _IN_PLACE, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused:") and "m.onnx.data" in lines[0], lines
    assert "another process holds it open" in lines[0]
    assert lines[1:] == ["unchanged", "aligned"]


def test_in_place_align_with_the_weights_mapped_on_linux(tmp_path):
    """On Linux the same align replaces the weights under the mapping (which keeps the old ones)."""
    done = _run(None, "-c", textwrap.dedent(_IN_PLACE), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "replaced"


@pytest.mark.parametrize("platform", ["windows", "macos"])
def test_a_durable_commit_flushes_every_file(platform, tmp_path):
    """durable=True flushes both new files: on Windows through a descriptor that may
    write (a read-only one is refused there), on macOS with F_FULLFSYNC."""
    done = _python(
        platform,
        """
        import numpy as np, onnx, platform_simulation as sim
        from onnx import helper, numpy_helper, TensorProto
        from onnx_light.cli import main
        W = numpy_helper.from_array(np.ones((64, 64), np.float32), "W")
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [W])
        onnx.save(helper.make_model(graph), "m.onnx", save_as_external_data=True,
                  location="m.onnx.data", size_threshold=0)
        assert main(["align", "-q", "--durable", "m.onnx", "out.onnx"]) == 0
        print("\\n".join(sim.flushed))
        """,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    flushed = [os.path.basename(p) for p in done.stdout.split()]
    assert any(n.startswith(".out.onnx.data.") for n in flushed), flushed
    assert any(n.startswith(".out.onnx.") and ".data." not in n for n in flushed), flushed


def test_positioned_reads_without_preadv_or_pread(tmp_path, monkeypatch):
    """macOS before 11 (pread, no preadv) and Windows (neither): the same bytes, from
    threads sharing one descriptor."""
    from concurrent.futures import ThreadPoolExecutor

    from onnx_light.onnx._system import files

    data = os.urandom(1 << 20)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDWR)
    try:
        for missing in (["preadv"], ["preadv", "pread", "pwrite"]):
            for name in missing:
                monkeypatch.delattr(os, name, raising=False)

            def read(i):
                buf = bytearray(4096)
                n = files.pread_into(fd, memoryview(buf), i * 4096)
                return bytes(buf[:n]) == data[i * 4096 : (i + 1) * 4096]

            with ThreadPoolExecutor(4) as pool:
                assert all(pool.map(read, range(256)))
            assert files.pread(fd, 10, len(data) - 4) == data[-4:]
            assert files.pwrite(fd, b"xyz", 5) == 3
            assert files.pread(fd, 3, 5) == b"xyz"
            assert files.pwrite(fd, data[5:8], 5) == 3
            monkeypatch.undo()
    finally:
        os.close(fd)
