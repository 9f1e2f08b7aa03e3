"""Interrupts: SIGINT or SIGTERM at any instant of a re-align, or of a dedup of two models.

The rule, as a user hits it: an interrupted ``align_external_data_streaming``
leaves the old files byte-identical or the new set complete, never a mix, and
no ``*.onnx-light-tmp`` nor ``*.onnx-light-old`` file behind.

Each trial forks a child that runs one call (Python's default SIGINT handler,
SIGTERM's default disposition); the parent signals it at a random instant:
half the trials a uniform delay after the fork (up to 1.2x the longest call
seen), half 0-12 ms after the child's last progress callback (the commit
window); while only one outcome occurred, more trials follow (:func:`run_trials`). The whole folder (every name -> bytes, hidden files included) must
then equal the snapshot before the call ("old") or after an uninterrupted call
("new", deterministic); a "new" model must load with the expected weights.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import statistics
import tempfile
import time
import traceback

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit.atomic import OLD_SUFFIX, TMP_SUFFIX

N_TENSORS, SHARD, SRC_ALIGN, DST_ALIGN = 100, 2048, 64, 4096
N_INT, N_TERM = 36, 8  # per case: 6 cases -> 216 SIGINT and 48 SIGTERM trials
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# case -> (in place, source shard size, destination shard size)
CASES = {
    "inplace-one-to-one": (True, None, None),
    "inplace-one-to-shards": (True, None, SHARD),
    "inplace-shards-to-shards": (True, SHARD, SHARD),
    "inplace-shards-to-one": (True, SHARD, None),
    "newdir-one-to-one": (False, None, None),
    "newdir-shards-to-shards": (False, SHARD, SHARD),
}


@pytest.fixture(scope="module")
def model() -> tuple[onnx.ModelProto, dict]:
    """A chain of Add nodes on 100 float32 initializers of 1000 bytes, and {name: array}."""
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal(250).astype(np.float32) for i in range(N_TENSORS)}
    nodes = [
        helper.make_node("Add", ["x" if i == 0 else f"h{i - 1}", f"w{i}"], [f"h{i}"])
        for i in range(N_TENSORS)
    ]
    nodes.append(helper.make_node("Identity", [f"h{N_TENSORS - 1}"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [250])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [250])],
        [numpy_helper.from_array(a, n) for n, a in weights.items()],
    )
    return helper.make_model(graph), weights


def snapshot(root: str) -> dict:
    """{relative path: bytes} of every file under ``root`` (folders map to None)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        out.update({os.path.normpath(os.path.join(rel, d)): None for d in dirs})
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                out[os.path.normpath(os.path.join(rel, name))] = f.read()
    return out


def describe_mix(now: dict, old: dict, new: dict) -> str:
    """Which files are as before, as after, neither, extra or missing."""
    keys = sorted(set(now) | set(old) | set(new))
    sets = {"leftover": [k for k in now if k.endswith((TMP_SUFFIX, OLD_SUFFIX))]}
    sets["as old only"] = [k for k in keys if k in now and now[k] == old.get(k, 0) != new.get(k)]
    sets["as new only"] = [k for k in keys if k in now and now[k] == new.get(k, 0) != old.get(k)]
    sets["neither"] = [
        k
        for k in now
        if now[k] != old.get(k, 0) and now[k] != new.get(k, 0) and k not in sets["leftover"]
    ]
    sets["missing"] = [k for k in keys if k not in now and k in old and k in new]
    sets["gone (in old only)"] = [k for k in keys if k not in now and k in old and k not in new]
    sets["absent (in new only)"] = [k for k in keys if k not in now and k in new and k not in old]
    return "; ".join(f"{len(v)} {k} {sorted(v)[:3]}" for k, v in sets.items() if v)


def _child(call, pipe_w: int, log_fd: int) -> None:
    """Run ``call(progress)`` in the forked child and exit: 0, 130 (Ctrl-C) or 1."""
    code = 1
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)  # what the library or Python itself prints
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        told = []

        def progress(done: int, total: int) -> None:
            if done == total and not told:
                told.append(os.write(pipe_w, b"!"))

        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
            call(progress)
            code = 0
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # sys.stderr may be pytest's capture: write to the log itself
            os.write(log_fd, traceback.format_exc().encode())
    except KeyboardInterrupt:
        code = 130
    finally:
        os._exit(code)


def run_trial(call, sig: int | None = None, mode: str = "", delay: float = 0.0):
    """Fork a child running ``call``; signal it (``mode``: "fork" or "progress" + ``delay``).

    Returns:
        ``(wait status, the child's output, seconds from fork to its end)``.
    """
    pipe_r, pipe_w = os.pipe()
    with tempfile.TemporaryFile() as log:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # until the child's handlers
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(call, pipe_w, log.fileno())
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(pipe_w)
        try:
            if sig is not None:
                if mode == "fork":
                    time.sleep(max(0.0, start + delay - time.monotonic()))
                elif select.select([pipe_r], [], [], 10)[0] and os.read(pipe_r, 1):
                    time.sleep(delay)
                os.kill(pid, sig)
            status, hung = wait_child(pid)
        finally:
            os.close(pipe_r)
        elapsed = time.monotonic() - start
        log.seek(0)
        return status, log.read().decode(errors="replace") + hung, elapsed


def wait_child(pid: int, timeout: float = 30.0) -> tuple[int, str]:
    """The child's wait status; a child still running after ``timeout`` is SIGKILLed."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status, ""
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitpid(pid, 0)[1], f"\n(hung: killed after {timeout:.0f} s)"
        time.sleep(0.0005)


def child_problem(status: int, sig: int | None, output: str) -> str | None:
    """None when the child ended as the signal allows, else what went wrong."""
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return None
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 130 and sig == signal.SIGINT:
        return None
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == sig:
        return None
    how = (
        f"exit {os.WEXITSTATUS(status)}"
        if os.WIFEXITED(status)
        else f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    )
    return f"child {how}, output:\n{output}"


def loads_expected(path: str, weights: dict) -> bool:
    """Whether the model at ``path`` loads with exactly ``weights`` as initializers."""
    got = {t.name: numpy_helper.to_array(t) for t in onnxl.load(path).graph.initializer}
    return got.keys() == weights.keys() and all(np.array_equal(got[n], weights[n]) for n in got)


@pytest.mark.parametrize("case", list(CASES))
def test_interrupt_leaves_old_or_new(case, model, tmp_path):
    """SIGINT/SIGTERM at random instants: the folder is the old state or the new one."""
    proto, weights = model
    in_place, src_shard, dst_shard = CASES[case]
    template, work = str(tmp_path / "template"), str(tmp_path / "work")
    src_dir = template if in_place else os.path.join(template, "src")
    os.makedirs(src_dir)
    opts = onnxl.SerializeOptions(SRC_ALIGN, size_threshold=1000, max_shard_size=src_shard)
    onnxl.save(proto, os.path.join(src_dir, "m.onnx"), location="m.onnx.data", options=opts)
    if not in_place:
        os.mkdir(os.path.join(template, "out"))
    src = os.path.join(work, "m.onnx") if in_place else os.path.join(work, "src", "m.onnx")
    dst = src if in_place else os.path.join(work, "out", "m.onnx")

    def call(progress) -> None:
        onnxl.align_external_data_streaming(
            src,
            dst,
            "m.onnx.data",
            DST_ALIGN,
            options=onnxl.WriteOptions(progress=progress, max_shard_size=dst_shard),
        )

    def reset() -> None:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, work)

    old = snapshot(template)
    news, durations = [], []
    for _ in range(3):  # uninterrupted runs: the new state, and how long a call takes
        reset()
        status, output, elapsed = run_trial(call)
        assert child_problem(status, None, output) is None, output
        news.append(snapshot(work))
        durations.append(elapsed)
    new = news[0]
    assert news[1] == new == news[2], "an uninterrupted re-align is not deterministic"
    assert new != old and loads_expected(dst, weights)
    duration = statistics.median(durations)

    seed = 1000 + list(CASES).index(case)
    trials = [signal.SIGINT] * N_INT + [signal.SIGTERM] * N_TERM
    counts, bad = run_trials(
        call, reset, work, (old, new), lambda: loads_expected(dst, weights), trials, seed, duration
    )
    summary = f"{case} (seed {seed}, call {duration * 1000:.1f} ms): {counts}"
    assert not bad, f"{summary}, {len(bad)} bad trials, e.g.\n" + "\n".join(bad[:3])
    assert counts["old"] and counts["new"], f"{summary}: both outcomes must occur"


EXTRA = 60  # trials added, at most, until both outcomes occurred


def run_trials(call, reset, work, states, check_new, trials, seed, duration):
    """Signal ``call`` at random instants, one trial per signal of ``trials``, then
    (while only one outcome occurred) up to :data:`EXTRA` more.

    Half the trials signal a uniform delay after the fork, up to 1.2x the longest
    call seen so far (every trial's own time counts: on a busy machine calls grow
    longer, and the delays with them); half 0-12 ms after the last progress
    callback. The extra trials alternate a signal at once (the old state) and one
    up to 2x the longest call (mostly the new one), so that both outcomes occur
    however fast the machine runs, decided from what the trials did.

    Args:
        call: the call, given the progress callback.
        reset: puts the folder ``work`` back as before the call.
        work: the folder the call changes.
        states: ``(old, new)``: the folder's snapshots before and after the call.
        check_new: whether the new model loads as expected, once the folder is new.
        trials: the signal of each planned trial.
        seed: the random instants' seed.
        duration: how long an uninterrupted call took.

    Returns:
        ``({"old": n, "new": n, "mix": n}, [what went wrong, per bad trial])``.
    """
    old, new = states
    rng = random.Random(seed)
    counts, bad = {"old": 0, "new": 0, "mix": 0}, []
    planned = [(sig, "fork" if i % 2 == 0 else "progress", 1.2) for i, sig in enumerate(trials)]
    extra = [(signal.SIGINT, "fork", 0.0 if i % 2 == 0 else 2.0) for i in range(EXTRA)]
    for i, (sig, mode, spread) in enumerate(planned + extra):
        if i >= len(planned) and counts["old"] and counts["new"]:
            break
        delay = rng.uniform(0, spread * duration) if mode == "fork" else rng.uniform(0, 0.012)
        where = f"trial {i} ({signal.Signals(sig).name}, {delay * 1000:.2f} ms after {mode})"
        reset()
        status, output, elapsed = run_trial(call, sig, mode, delay)
        duration = max(duration, elapsed)
        problem = child_problem(status, sig, output)
        if problem:
            bad.append(f"{where}: {problem}")
        now = snapshot(work)
        kind = "old" if now == old else "new" if now == new else "mix"
        counts[kind] += 1
        if kind == "new" and not check_new():
            bad.append(f"{where}: the new model does not load with the expected weights")
        if kind == "mix":
            bad.append(f"{where}: a mix: {describe_mix(now, old, new)}")
    return counts, bad


def _old_or_new(call, template: str, work: str, expected: tuple[str, dict], seed: int) -> None:
    """``call`` on a copy of ``template`` in ``work``: once uninterrupted (the new
    state; ``expected``: the model it writes and its weights), then 24 SIGINT and 6
    SIGTERM trials at random instants (:func:`run_trials`): after each, the folder
    must be as before or as after, and both must occur."""

    def reset() -> None:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, work)

    old = snapshot(template)
    reset()
    status, output, duration = run_trial(call)
    assert child_problem(status, None, output) is None, output
    new = snapshot(work)
    assert new != old and loads_expected(*expected)
    trials = [signal.SIGINT] * 24 + [signal.SIGTERM] * 6
    counts, bad = run_trials(
        call, reset, work, (old, new), lambda: loads_expected(*expected), trials, seed, duration
    )
    assert not bad, f"{counts}, {len(bad)} bad trials, e.g.\n" + "\n".join(bad[:3])
    assert counts["old"] and counts["new"], f"{counts}: both outcomes must occur"


@pytest.mark.parametrize("in_place", [True, False], ids=["inplace", "newdir"])
def test_interrupted_dedup_leaves_old_or_new(in_place, model, tmp_path):
    """Deduplicating two models: interrupted, every model and the weights are old or new."""
    proto, weights = model
    template, work = str(tmp_path / "template"), str(tmp_path / "work")
    src_dir = template if in_place else os.path.join(template, "src")
    os.makedirs(src_dir)
    variant = onnx.ModelProto()
    variant.CopyFrom(proto)
    changed = numpy_helper.from_array(-weights["w0"], "w0")  # one weight differs
    variant.graph.initializer[0].CopyFrom(changed)
    opts = onnxl.SerializeOptions(SRC_ALIGN, size_threshold=1000)
    for name, m in (("a", proto), ("b", variant)):
        onnxl.save(
            m, os.path.join(src_dir, f"{name}.onnx"), location=f"{name}.onnx.data", options=opts
        )
    if not in_place:
        os.mkdir(os.path.join(template, "out"))
    srcs = [
        os.path.join(work if in_place else os.path.join(work, "src"), f"{n}.onnx") for n in "ab"
    ]
    dsts = srcs if in_place else [os.path.join(work, "out", f"{n}.onnx") for n in "ab"]

    def call(progress) -> None:
        onnxl.deduplicate_external_data(
            srcs, dsts, "shared.data", options=onnxl.WriteOptions(progress=progress)
        )

    _old_or_new(call, template, work, (dsts[0], weights), 77 + in_place)


@pytest.mark.parametrize("in_place", [True, False], ids=["inplace", "newdir"])
def test_interrupted_convert_leaves_old_or_new(in_place, model, tmp_path):
    """Converting to float16 (chunks cast on a pool of threads): interrupted, the folder
    is the float32 model or the float16 one."""
    proto, weights = model
    template, work = str(tmp_path / "template"), str(tmp_path / "work")
    src_dir = template if in_place else os.path.join(template, "src")
    os.makedirs(src_dir)
    opts = onnxl.SerializeOptions(SRC_ALIGN, size_threshold=1000)
    onnxl.save(proto, os.path.join(src_dir, "m.onnx"), location="m.onnx.data", options=opts)
    if not in_place:
        os.mkdir(os.path.join(template, "out"))
    src = os.path.join(work, "m.onnx") if in_place else os.path.join(work, "src", "m.onnx")
    dst = src if in_place else os.path.join(work, "out", "m.onnx")

    def call(progress) -> None:
        onnxl.convert_float_to_float16(
            src, dst, "m.onnx.data", options=onnxl.WriteOptions(progress=progress)
        )

    half = {n: a.astype(np.float16) for n, a in weights.items()}
    _old_or_new(call, template, work, (dst, half), 91 + in_place)
