"""The command line's progress bar: bytes done, then throughput and time left."""

from __future__ import annotations

import onnx_light._progress as progress_module
from onnx_light._progress import Progress, duration, rate

MiB = 2**20


def test_text_bar_shows_throughput_and_time_left_after_a_second(monkeypatch, capsys):
    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    bar = Progress("align m.onnx")
    bar.tqdm = None  # the text bar, whether tqdm is installed or not
    bar(0, 400 * MiB)
    clock[0] += 0.5
    bar(50 * MiB, 400 * MiB)
    early = capsys.readouterr().err
    assert "50.0 MiB/400.0 MiB" in early and "left" not in early  # under a second: no rate
    clock[0] += 1.5  # 2 s for 100 MiB: 50 MiB/s, 300 MiB left: 6 s
    bar(100 * MiB, 400 * MiB)
    line = capsys.readouterr().err
    assert "100.0 MiB/400.0 MiB, 50.0 MiB/s, 6 s left" in line
    bar.close()


def test_rate_and_duration_read_well():
    assert rate(3 * MiB, 2.0) == "1.5 MiB/s"
    assert rate(10, 0) == "-"
    assert duration(5.4) == "5 s"
    assert duration(75) == "1 min 15 s"
    assert duration(3 * 3600 + 120) == "3 h 02 min"


def test_info_on_a_100_gib_model_reads_only_its_metadata(tmp_path):
    """A model whose weights file is 100 GiB (sparse: no disk used): info reads the
    ``.onnx`` and the size of the data file, not its bytes."""
    import subprocess
    import sys

    import onnx
    from onnx import TensorProto, helper

    n, size = 100, 2**30  # 100 tensors of 1 GiB
    inits = []
    for i in range(n):
        t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[size // 4])
        t.data_location = TensorProto.EXTERNAL
        for key, value in (
            ("location", "m.data"),
            ("offset", str(i * size)),
            ("length", str(size)),
        ):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        inits.append(t)
    graph = helper.make_graph([], "g", [], [], inits)
    onnx.save(helper.make_model(graph), tmp_path / "m.onnx")
    with open(tmp_path / "m.data", "wb") as f:
        f.truncate(n * size)
    code = (
        "import sys\nfrom onnx_light.cli import main\n"
        f"code = main(['info', {str(tmp_path / 'm.onnx')!r}])\n"
        "io = dict(line.split(': ') for line in open('/proc/self/io').read().splitlines())\n"
        "print('RCHAR', io['rchar'])\nsys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rchar = int(done.stdout.split("RCHAR")[-1])
    assert rchar < 64 * 2**20, f"info read {rchar} bytes of a 100 GiB model"
    assert "100.0 GiB" in done.stdout, done.stdout[-2000:]


def test_the_tqdm_bar_learns_a_total_that_shrinks():
    import pytest

    pytest.importorskip("tqdm")
    bar = Progress("dedup 2 models")
    mib = 2**20
    bar(100 * mib, 1000 * mib)
    bar(400 * mib, 400 * mib)
    assert bar.bar.total == 400 and bar.bar.n == 400  # in MiB
    text = str(bar.bar)
    assert "400.0/400.0 MiB" in text and "MB" not in text and "MiB/s" in text
    bar.close()
