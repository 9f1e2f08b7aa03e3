"""The floors of ``make bench`` and the per-tensor rows: what their targets assume."""

from __future__ import annotations

import math
import os
import pathlib

import onnx
import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "benchmarks")


@pytest.fixture
def bench(monkeypatch):
    """The benchmark's modules (they import each other by plain name)."""
    monkeypatch.syspath_prepend(BENCH)
    import ops
    import report
    import sources
    import suite

    return {"ops": ops, "report": report, "sources": sources, "suite": suite}


def test_dedup_floor_writes_each_unique_byte_once(bench, tmp_path):
    """floor_dedup's output is a's weights file, then the tensors b does not share."""
    ops, sources = bench["ops"], bench["sources"]
    paths = sources.Paths(str(tmp_path), "2MiB")
    a, b = paths.models("pair")
    os.makedirs(os.path.dirname(a))
    sources._write_pair([a, b], *sources.SIZES["2MiB"])
    out = tmp_path / "out"
    out.mkdir()
    case = ops.floor_dedup(paths, str(out))
    case.run()
    da, db = paths.datas("pair")
    expected, data_b = (pathlib.Path(d).read_bytes() for d in (da, db))
    for t in onnx.load(b, load_external_data=False).graph.initializer:
        if t.name in ("W0", "B0"):  # 1 weight (and its bias) out of 8 at this size
            e = {x.key: x.value for x in t.external_data}
            start = int(e["offset"])
            expected += data_b[start : start + int(e["length"])]
    (written,) = case.outputs
    assert pathlib.Path(written).read_bytes() == expected
    naive = os.path.getsize(da) + os.path.getsize(db)
    assert os.path.getsize(written) == pytest.approx(naive * bench["suite"].DEDUP_BYTES, rel=0.01)


@pytest.fixture
def many(bench, tmp_path):
    """The many-tensor sources at the ``tiny`` size (2,000 and 500 tensors)."""
    bench["sources"].ensure(str(tmp_path), [], ["tiny"], log=lambda _msg: None)
    return bench["sources"].Paths(str(tmp_path), "tiny")


@pytest.mark.parametrize("op", ["floor_meta_many", "info_many", "verify_quarter", "align_many"])
def test_per_tensor_operations_say_their_tensors_and_onnx_size(bench, many, tmp_path, op):
    case = bench["ops"].OPS[op](many, str(tmp_path))
    kind = "quarter" if op.endswith("quarter") else "many"
    assert case.tensors == bench["sources"].MANY_TENSORS["tiny"] // (4 if kind == "quarter" else 1)
    assert case.onnx_bytes == os.path.getsize(getattr(many, kind))
    case.run()
    if op == "floor_meta_many":  # the same model, parsed and written again
        (written,) = case.outputs
        mine = onnx.load(written, load_external_data=False)
        assert mine == onnx.load(many.many, load_external_data=False)


def test_cli_operation_fails_on_a_nonzero_exit(bench, many, tmp_path):
    os.remove(many.many + ".data")  # verify then reports every reference
    case = bench["ops"].OPS["verify_many"](many, str(tmp_path))
    with pytest.raises(RuntimeError, match="exit code 1"):
        case.run()


def _rec(seconds, peak, tensors=200_000, onnx_bytes=16_000_000):
    return {"seconds": seconds, "peak": peak, "tensors": tensors, "onnx_bytes": onnx_bytes}


def test_target_on_the_onnx_size_and_the_per_tensor_cost(bench):
    report, suite = bench["report"], bench["suite"]
    row = suite.Row("many", "align_many", "peak", "floor_meta_many", "onnx", 4.0)
    assert row.target_text() == "<= 4x the .onnx"
    plan = [("1GiB", ["align_many", "floor_meta_many"])]
    records = {
        ("1GiB", "align_many"): [_rec(2.0, 60_000_000), _rec(2.2, 64_000_000)],
        ("1GiB", "floor_meta_many"): [_rec(0.1, 128_000_000), _rec(0.1, 128_000_000)],
    }
    (result,) = report.evaluate([row], plan, records)
    assert result["result"] == "PASS"  # 62 MB <= 4 x 16 MB, whatever the floor's peak
    assert result["per_tensor"] == (
        "310 B per tensor, 3.9x the .onnx; metadata floor: 640 B per tensor, 8.0x the .onnx"
    )
    records[("1GiB", "align_many")] = [_rec(2.0, 65_000_000)]
    (result,) = report.evaluate([row], plan, records)
    assert result["result"] == "FAIL"
    time_row = suite.Row("many", "align_many", "seconds", "floor_meta_many", "ratio", 8.0)
    (timed,) = report.evaluate([time_row], plan, records)
    assert timed["result"] == "FAIL" and math.isclose(timed["ratio_raw"], 20.0)
    assert timed["per_tensor"] == "10.0 us per tensor; metadata floor: 0.5 us per tensor"
    text = report.summary([result, timed])
    assert "10.0 us per tensor; metadata floor: 0.5 us per tensor" in text
    table = report.markdown([result, timed], "", "", {None: "ext4"})
    assert "time: 10.0 us per tensor" in table


def test_per_tensor_rows_inform_and_growth_is_targeted(bench):
    """The cost of a tensor against the metadata floor is shown, not judged (a model of
    thousands of tensors waits tens of milliseconds for it); a cost that grows faster
    than the tensors, and the re-align against its peer, keep their targets."""
    suite = bench["suite"]
    rows = {(r.op, r.ref, r.figure): r for r in suite.ROWS}
    for group, (pairs, (floor, floor_quarter)) in suite.PER_TENSOR.items():
        ops = suite.GROUPS[group][0]
        assert floor in ops and floor_quarter in ops
        for many, quarter in pairs:
            assert many in ops and quarter in ops
            for figure in ("seconds", "peak"):
                assert rows[(many, floor, figure)].kind is None
                assert rows[(quarter, floor_quarter, figure)].kind is None
    assert not [r for r in suite.ROWS if r.kind and r.ref in suite.ACCESS_FLOOR.values()]
    assert rows[("align_many", "align_quarter", "seconds")].target == 4.8
    assert rows[("dedup_many", "dedup_quarter", "seconds")].target == 5.0
    assert rows[("align_many", "ir_align_many", "seconds")].kind == "ratio"
    assert not [r for r in suite.ROWS if r.op == "convert_many" and r.kind]
    assert rows[("dedup", "floor_dedup", "seconds")].target == 1.1
