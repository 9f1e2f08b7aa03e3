"""The cold rows of ``make bench``: sources, the cgroup helper, OOM-kills as rows."""

from __future__ import annotations

import filecmp
import math
import os
import subprocess
import sys

import onnx
import pytest

from benchmarks.harness import make_gemm_model

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "benchmarks")


@pytest.fixture
def bench(monkeypatch):
    """The benchmark's modules (they import each other by plain name)."""
    monkeypatch.syspath_prepend(BENCH)
    import cgroup
    import report
    import sources
    import suite

    return {"cgroup": cgroup, "report": report, "sources": sources, "suite": suite}


def test_streamed_source_is_onnx_save(bench, tmp_path):
    """A source larger than memory is written tensor by tensor, as onnx.save writes it."""
    sources = bench["sources"]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sources._write_two_streaming(str(a / "model.onnx"), 8, 256)
    model = make_gemm_model(8, 256, lead_table=sources.LEAD_TABLE)
    onnx.save(model, str(b / "model.onnx"), save_as_external_data=True, location=sources.DATA)
    assert filecmp.cmp(a / sources.DATA, b / sources.DATA, shallow=False)
    mine = onnx.load(str(a / "model.onnx"), load_external_data=False)
    theirs = onnx.load(str(b / "model.onnx"), load_external_data=False)
    assert [list(t.external_data) for t in mine.graph.initializer] == [
        list(t.external_data) for t in theirs.graph.initializer
    ]
    onnx.checker.check_model(str(a / "model.onnx"))


def _rec(seconds, canary=0):
    return {"seconds": seconds, "peak": 1, "canary": canary}


def test_oom_kill_is_a_row_not_an_error(bench):
    report, suite = bench["report"], bench["suite"]
    oom = {"failed": "OOM-killed (cgroup limit 2048 MiB)", "seconds": None, "peak": None}
    records = {
        ("8GiB", "cg_align"): [_rec(5.0), _rec(6.0)],
        ("8GiB", "cg_cp"): [_rec(7.0), _rec(7.0)],
        ("8GiB", "cg_ir"): [oom, oom],
        ("8GiB", "cg_onnx"): [oom, oom],
    }
    plan = [("8GiB", list({op for _, op in records}))]
    rows = [
        suite.Row("cgroup", "cg_align", "seconds", ("cg_cp", "cg_ir"), "ratio", 1.05),
        suite.Row("cgroup", "cg_align", "seconds", "cg_onnx"),
    ]
    faster, onnx_row = report.evaluate(rows, plan, records)
    # the faster of cp and a reference the cgroup killed: cp
    assert faster["result"] == "PASS" and math.isclose(faster["ref_raw"], 7.0)
    assert onnx_row["result"] == "info"
    assert onnx_row["ref value"].startswith("OOM-killed")


def test_le_target(bench):
    report, suite = bench["report"], bench["suite"]
    mib = suite.MiB
    records = {
        ("4GiB", "cold_align"): [_rec(1.0, 20 * mib)],
        ("4GiB", "cold_cp"): [_rec(1.0, 10 * mib)],
    }
    row = suite.Row("cold", "cold_align", "canary", "cold_cp", "le", 16 * mib)
    (result,) = report.evaluate([row], [("4GiB", ["cold_align", "cold_cp"])], records)
    assert result["result"] == "PASS" and row.target_text() == "<= ref + 16 MiB"
    records[("4GiB", "cold_align")] = [_rec(1.0, 30 * mib)]
    (result,) = report.evaluate([row], [("4GiB", ["cold_align", "cold_cp"])], records)
    assert result["result"] == "FAIL"


def test_conditions(bench):
    suite = bench["suite"]
    assert suite.condition("cg_align") == "cgroup"
    assert suite.condition("cold_align_drop") == "cold"
    assert suite.condition("floor_device") == "cold"
    assert suite.condition("align_durable") is None
    ops = {op for group in suite.GROUPS.values() for op in group[0]}
    sys.path.insert(0, BENCH)
    try:
        import ops as bench_ops
    finally:
        sys.path.remove(BENCH)
    assert ops <= set(bench_ops.OPS)
    assert all(op in suite.LABELS for op in ops)


@pytest.mark.skipif(
    os.environ.get("ONNX_LIGHT_CGROUP") != "1",
    reason="creates a memory cgroup of its own under /sys/fs/cgroup, as benchmarks/run.py "
    "--cgroup does: set ONNX_LIGHT_CGROUP=1 to run it (root needed)",
)
def test_cgroup_oom_kills(bench):
    """The cgroup rows' limit holds: a child over it is OOM-killed, and the cgroup is
    removed after (opt-in, as the rows are: ``make test`` writes nothing under /sys)."""
    cgroup = bench["cgroup"]
    reason = cgroup.cgroup_unavailable()
    if reason:
        pytest.skip(reason)
    with cgroup.MemoryCgroup(64 << 20) as cg:
        code = "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"
        proc = subprocess.run([sys.executable, "-c", code], preexec_fn=cg.enter)
        assert proc.returncode != 0
        assert cg.oom_kills() >= 1
        assert cg.peak() is None or cg.peak() <= 64 << 20
    assert not os.path.exists(cg.path)


def test_resident(bench, tmp_path):
    cgroup = bench["cgroup"]
    path = tmp_path / "f"
    path.write_bytes(b"x" * (1 << 20))
    got = cgroup.resident(str(path))
    if got is None:
        pytest.skip("no fincore")
    assert 0 <= got <= 1 << 20
