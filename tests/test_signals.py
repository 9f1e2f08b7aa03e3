"""The signal guard's corner cases, each in a forked child (found by review).

A Ctrl-C never hides a SIGTERM; a Ctrl-C that user code swallowed leaves
later signals acting at once; a SIGTERM while the commit waits for the
folder's lock ends the process at once; the handlers are the caller's again
after a call, whatever arrived while they were put back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import atomic as _atomic
from onnx_light.onnx._commit.atomic import TMP_SUFFIX
from onnx_light.onnx._system import signals as _signals


def _model(n: int = 4, size: int = 1_000_000):
    inits = [numpy_helper.from_array(np.full(size, i, np.float32), f"W{i}") for i in range(n)]
    nodes = [helper.make_node("Identity", [t.name], [t.name + "_out"]) for t in inits]
    outs = [helper.make_tensor_value_info(t.name + "_out", TensorProto.FLOAT, None) for t in inits]
    return helper.make_model(helper.make_graph(nodes, "g", [], outs, inits))


HANG_LIMIT = 60  # seconds: a child still running then hung (no speed claim)


def _in_child(fn) -> int:
    """Run ``fn`` in a forked child with the default handlers; return how it ended
    (-signal, or exit code). A child still running after HANG_LIMIT s is killed and
    the test fails, saying it hung."""
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        code = 0
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            fn()
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    while True:  # a child that hangs is killed, and reported as such
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() - start > HANG_LIMIT:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the call hung: killed after {HANG_LIMIT} s", pytrace=False)
        time.sleep(0.01)


def _no_leftovers(folder) -> None:
    assert not [n for n in os.listdir(folder) if TMP_SUFFIX in n or "onnx-light-old" in n]


@pytest.fixture
def source(tmp_path):
    opts = onnxl.SerializeOptions(size_threshold=1024)
    onnxl.save(_model(), tmp_path / "m.onnx", "m.data", options=opts)
    return tmp_path


def test_sigterm_is_not_hidden_by_a_sigint_held_with_it(source, monkeypatch):
    """Both arrive during the renames: the process ends by SIGTERM, not with a Ctrl-C."""
    run = _atomic._Swap.run
    sent = []

    def swap(self):
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        run(self)

    monkeypatch.setattr(_atomic._Swap, "run", swap)
    code = _in_child(
        lambda: onnxl.align_external_data_streaming(source / "m.onnx", source / "a.onnx")
    )
    assert code == -signal.SIGTERM
    _no_leftovers(source)


def test_a_swallowed_ctrl_c_leaves_later_signals_acting_at_once(source):
    """User code that catches one KeyboardInterrupt: a later SIGTERM still ends the call
    at once (the copy does not run to its end first), and cleans up."""
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 2:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)
            except KeyboardInterrupt:
                pass
        if len(calls) == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        if len(calls) > 6:
            os._exit(3)  # still copying after SIGTERM

    code = _in_child(
        lambda: onnxl.align_external_data_streaming(
            source / "m.onnx",
            source / "a.onnx",
            chunk_size=65536,
            options=onnxl.WriteOptions(progress=progress),
        )
    )
    assert code == -signal.SIGTERM
    assert not (source / "a.onnx").exists()
    _no_leftovers(source)


def test_sigterm_while_waiting_for_the_folder_lock_ends_at_once(source):
    """A reader holds the folder's lock: the writer waiting for it can still be stopped."""
    fd = os.open(source, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    try:

        def call():
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGTERM))
            onnxl.align_external_data_streaming(source / "m.onnx", source / "a.onnx")

        code = _in_child(call)  # the lock is held until the child ends: waiting on, it hangs
    finally:
        os.close(fd)
    assert code == -signal.SIGTERM
    assert not (source / "a.onnx").exists()
    _no_leftovers(source)


def test_handlers_are_the_callers_again_whatever_arrives_meanwhile(source, monkeypatch):
    """A Ctrl-C landing while the handlers are put back: the call raises it, and
    SIGTERM's own action is back (it ends the process)."""
    real = signal.signal

    def spy(signum, handler):
        old = real(signum, handler)
        restored = signum == signal.SIGINT and handler is signal.default_int_handler
        if restored and _signals._state.depth == 0:
            os.kill(os.getpid(), signal.SIGINT)
        return old

    def call():
        monkeypatch.setattr(signal, "signal", spy)
        with contextlib.suppress(KeyboardInterrupt):
            onnxl.align_external_data_streaming(source / "m.onnx", source / "a.onnx")
        monkeypatch.setattr(signal, "signal", real)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert _signals._state.critical == 0 and not _signals._state.pending
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)

    code = _in_child(call)
    assert code == -signal.SIGTERM
