"""The float16 conversion's one pass: the cast first, then only the values it sent to an
edge of float16 clipped, block by block and chunk by chunk, bit for bit onnxruntime's
converter (its bits and the values it changed).

A block is looked at again only when one of four reductions over its float16 bits finds
a value at an edge (positive or negative, small or large): each kind alone in its block
at any place, several kinds in one block, zeros beside tiny values (found on the
source's bits), and blocks and chunks cut anywhere must give onnxruntime's bits.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest

import onnx_light.onnx as onnxl
from onnx_light.onnx._write import clip as clip_module
from onnx_light.onnx._write import convert as convert_module
from onnx_light.onnx._write import writer as writer_module
from onnx_light.onnx._write.clip import clip_to_float16

float16 = pytest.importorskip("onnxruntime.transformers.float16")

LOW = np.float32(5.96e-08)  # the default min_positive_val, as float32 compares it
# each alone in a block of ordinary values: (value, whether the default limits change it)
EDGES = [
    (1e-9, True),  # cast to 0: raised to the smallest subnormal
    (-1e-9, True),
    (4e-8, True),  # cast to the smallest subnormal already: its bits stay, it is counted
    (-4e-8, True),
    (2.9802322e-08, True),  # half the smallest subnormal: a tie, cast to 0
    (float(np.nextafter(LOW, np.float32(0))), True),  # just under the limit
    (float(LOW), False),  # the limit itself stays
    (1e-45, True),  # a float32 subnormal
    (0.0, False),
    (-0.0, False),
    (65504.0, False),  # the largest float16
    (65519.0, True),  # above 65504, cast to 65504 anyway: counted
    (-65519.0, True),
    (65520.0, True),  # the cast would make it infinite
    (-65520.0, True),
    (1e30, True),
    (-3.4028235e38, True),
    (np.inf, False),
    (-np.inf, False),
]
NANS = [0x7FC00001, 0xFFC12345, 0x7F800001, 0x7FBFFFFF]  # quiet, signalling, both signs


def _ort_bits(values, *limits) -> list[int]:
    with np.errstate(invalid="ignore", over="ignore"):
        return float16.convert_np_to_float16(values, *limits).view(np.uint16).tolist()


def _ort_count(values, low=5.96e-08, high=65504.0) -> int:
    """The values onnxruntime's rules change (compared in float32, as it compares them)."""
    with np.errstate(invalid="ignore"):
        a = np.abs(values)
        return int(
            np.count_nonzero(((a > 0) & (a < np.float32(low))) | ((a > high) & (a < np.inf)))
        )


def _ordinary(n: int, seed: int) -> np.ndarray:
    """Weights no limit touches: magnitudes from 0.01 to 100, both signs."""
    rng = np.random.default_rng(seed)
    magnitude = 10.0 ** rng.uniform(-2, 2, n)
    return (magnitude * rng.choice([-1.0, 1.0], n)).astype(np.float32)


def _each_edge_alone(block: int) -> np.ndarray:
    """One block per edge value and per NaN, each at another place in its block."""
    specials = np.concatenate(
        [np.array([v for v, _ in EDGES], np.float32), np.array(NANS, np.uint32).view(np.float32)]
    )
    values = _ordinary(block * specials.size, 1)
    for i, special in enumerate(specials):
        values[i * block + (i * 5) % block] = special
    return values


@pytest.mark.parametrize("block", [8, 13, 64])
@pytest.mark.parametrize("limits", [(), (1e-7, 1e4), (6.1e-05, 65504), (65504.0, 65504.0)])
def test_each_edge_alone_in_its_block(monkeypatch, block, limits):
    """A block holding a single value at an edge (each sign, each end, NaN, zeros) is
    clipped as onnxruntime clips it, and the value is counted when the rule changes it."""
    monkeypatch.setattr(clip_module, "BLOCK", block)
    values = _each_edge_alone(block)
    half, count = clip_to_float16(values, *limits)
    assert half.view(np.uint16).tolist() == _ort_bits(values, *limits)
    assert count == _ort_count(values, *limits)
    if not limits:
        assert count == sum(changed for _, changed in EDGES)


@pytest.mark.parametrize("few", [0, 1, 1024])
def test_several_edges_in_one_block(monkeypatch, few):
    """Small and large values of both signs, zeros among them, in one block: found once
    each, whether looked at one by one or found on the source's bits (few=0)."""
    monkeypatch.setattr(clip_module, "BLOCK", 16)
    monkeypatch.setattr(clip_module, "FEW", few)
    values = _ordinary(16 * 6, 2)
    values[0:4] = [1e-9, -1e-9, 1e5, -1e5]  # all four kinds
    values[16:19] = [3e-8, -0.0, -5e-8]  # the negative small kind, and a zero
    values[32:35] = [0.0, 0.0, 2e-8]  # zeros beside a tiny value
    values[48:51] = [7e4, np.inf, -np.inf]  # one large value, infinities that stay
    values[64:80] = 0.0  # a block of zeros
    values[80:96] = [1e-9 * (i + 1) * (-1) ** i for i in range(16)]  # a block of tiny ones
    half, count = clip_to_float16(values)
    assert half.view(np.uint16).tolist() == _ort_bits(values)
    assert count == _ort_count(values) == 4 + 2 + 1 + 1 + 16


def test_blocks_of_the_real_size_cut_anywhere():
    """Values at an edge on either side of each block boundary, a short last block."""
    size = clip_module.BLOCK
    values = _ordinary(3 * size + 5, 3)
    for at, value in [(0, 1e-9), (size - 1, -7e4), (size, -2e-8), (2 * size - 1, 0.0),
                      (2 * size, np.inf), (3 * size - 1, 65519.0), (3 * size + 4, -1e-40)]:  # fmt: skip
        values[at] = value
    out = np.empty(values.size, np.float16)
    half, count = clip_to_float16(values, out=out)
    assert half is out
    assert out.view(np.uint16).tolist() == _ort_bits(values)
    assert count == _ort_count(values) == 5


def test_a_block_of_zeros_with_tiny_values_among_them():
    """More zeros than are looked at one by one: the tiny values among them are still
    found (on the source's bits), the zeros (of both signs) kept."""
    values = np.zeros(clip_module.BLOCK + 7, np.float32)
    values[1::2] = -0.0
    values[[3, 100, 4097, clip_module.BLOCK + 1]] = [1e-9, -3e-8, 5e-8, -1e-30]
    values[[5, 6, 7]] = [LOW, -LOW, -np.nextafter(LOW, np.float32(0))]  # the limit stays
    half, count = clip_to_float16(values)
    assert half.view(np.uint16).tolist() == _ort_bits(values)
    assert count == 5


def test_the_limits_bits_and_the_cast_agree_for_every_limit():
    """For limits across float16's range, values just inside and outside each limit
    (and its float16 rounding) give onnxruntime's bits and count."""
    rng = np.random.default_rng(5)
    for low in [5.96e-08, 1e-7, 6.1e-05, 6.103515625e-05, 0.001, 1.0]:
        for high in [low, 1.0, 2.5, 1e4, 65504.0]:
            if high < low:
                continue
            near = [np.float32(low), np.float32(high)]
            near += [np.nextafter(x, t) for x in list(near) for t in (np.float32(0), np.inf)]
            near += [np.float32(np.float16(x)) for x in near]
            near = np.array(near, np.float32)
            values = np.concatenate([near, -near, _ordinary(200, int(rng.integers(99)))])
            half, count = clip_to_float16(values, low, high)
            assert half.view(np.uint16).tolist() == _ort_bits(values, low, high), (low, high)
            assert count == _ort_count(values, low, high), (low, high)


def _edge_weights(n: int) -> np.ndarray:
    values = _ordinary(n, 7)
    specials = [v for v, _ in EDGES] + list(np.array(NANS, np.uint32).view(np.float32))
    for i, special in enumerate(specials):  # spread over the chunks and blocks
        values[(i * 1237) % n] = special
    return values


def test_the_converter_across_chunks_and_threads(tmp_path, monkeypatch):
    """Tensors cut into many chunks (a short last one), converted on two threads that
    each reuse their buffers: onnxruntime's converter's bytes, and its changed values
    counted per tensor."""
    monkeypatch.setattr(convert_module, "CAST_CHUNK", 4096 + 12)  # 1027 values
    monkeypatch.setattr(writer_module, "CAST_THREADS", 2)
    monkeypatch.setattr(clip_module, "BLOCK", 300)
    weights = {"A": _edge_weights(64 * 401), "B": _edge_weights(50 * 419)[::-1].copy()}
    weights["B"][:1027] = 0.0  # a chunk of zeros, then one with zeros beside tiny values
    weights["B"][1027:2054:3] = 0.0
    weights["C"], weights["D"] = _edge_weights(300), _edge_weights(77)  # small: one batch
    inits = [onh.from_array(w.reshape(-1, 1), name) for name, w in weights.items()]
    nodes = [oh.make_node("Add", ["X", name], [f"Y{name}"]) for name in weights]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1])],
        [oh.make_tensor_value_info(f"Y{name}", onnx.TensorProto.FLOAT, None) for name in weights],
        inits,
    )
    src = str(tmp_path / "src.onnx")
    onnx.save(
        oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]),
        src,
        save_as_external_data=True,
        location="src.data",
        size_threshold=0,
    )
    result = onnxl.convert_float_to_float16(src, tmp_path / "o.onnx")
    expected = float16.convert_float_to_float16(onnx.load(src))
    ours = {t.name: t for t in onnx.load(tmp_path / "o.onnx").graph.initializer}
    for t in expected.graph.initializer:
        got = onh.to_array(ours[t.name]).view(np.uint16).ravel().tolist()
        assert got == onh.to_array(t).view(np.uint16).ravel().tolist(), t.name
    assert result.clipped == {name: _ort_count(w) for name, w in weights.items()}
    assert min(weights["A"].nbytes, weights["B"].nbytes) > convert_module.SMALL  # chunked
