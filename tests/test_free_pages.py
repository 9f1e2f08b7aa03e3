"""Free-page reporting held while measuring (``onnx_light.bench.free_pages``), on stand-in files."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from onnx_light.bench import free_pages as mod
from onnx_light.bench import hold_free_pages
from onnx_light.bench.free_pages import hold_order


def _buddyinfo(orders: int) -> str:
    return "Node 0, zone   Normal " + " ".join(["3"] * orders) + "\n"


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    """The two settings, /proc/buddyinfo and the state file as files under ``tmp_path``."""
    files = {
        "delay": tmp_path / "min_free_ms",
        "order": tmp_path / "page_reporting_order",
        "buddyinfo": tmp_path / "buddyinfo",
        "state": tmp_path / "state.json",
    }
    files["delay"].write_text("0\n")
    files["order"].write_text("5\n")
    files["buddyinfo"].write_text(_buddyinfo(11))
    monkeypatch.setattr(mod, "PAGE_REPORTING", str(files["delay"]))
    monkeypatch.setattr(mod, "PAGE_REPORTING_ORDER", str(files["order"]))
    monkeypatch.setattr(mod, "BUDDYINFO", str(files["buddyinfo"]))
    monkeypatch.setattr(mod, "STATE", str(files["state"]))
    return files


def _settings(kernel) -> tuple[str, str]:
    return kernel["delay"].read_text().strip(), kernel["order"].read_text().strip()


def test_reporting_is_held_above_the_largest_block_then_restored(kernel):
    kernel["buddyinfo"].write_text(_buddyinfo(13) + _buddyinfo(13))  # orders 0 to 12
    with hold_free_pages() as said:
        assert _settings(kernel) == ("300000", "13")  # no block is that large
        assert "from order 5 to 13, above the largest" in said and "from 0 ms to 300000 ms" in said
        assert json.loads(kernel["state"].read_text()) == {
            "pid": os.getpid(),
            "delay": "0",
            "order": "5",
        }
    assert _settings(kernel) == ("0", "5")
    assert not kernel["state"].exists()


def test_the_held_order_follows_the_allocators_orders(kernel):
    kernel["buddyinfo"].write_text(_buddyinfo(14))  # orders 0 to 13 (64 KiB pages on arm64)
    assert hold_order() == 14
    kernel["buddyinfo"].write_text("")
    assert hold_order() == 11


def test_settings_are_restored_after_an_interrupt(kernel):
    kernel["delay"].write_text("7")
    kernel["order"].write_text("9")
    with pytest.raises(KeyboardInterrupt), hold_free_pages():
        raise KeyboardInterrupt
    assert _settings(kernel) == ("7", "9")
    assert not kernel["state"].exists()


def _refusing(monkeypatch, path, refused: set[str]):
    """The kernel refusing some values of one setting (root writes any plain file)."""
    write = mod._write

    def refuse(p, value):
        return False if p == str(path) and value in refused else write(p, value)

    monkeypatch.setattr(mod, "_write", refuse)


def test_a_refused_order_holds_the_largest_block_and_says_so(kernel, monkeypatch):
    _refusing(monkeypatch, kernel["order"], {"11"})
    with hold_free_pages() as said:
        assert _settings(kernel) == ("300000", "10")
        assert "order 11 was refused" in said and "still reported" in said
    assert _settings(kernel) == ("0", "5")


def test_a_refused_delay_takes_the_next_one_and_the_order_is_held_anyway(kernel, monkeypatch):
    _refusing(monkeypatch, kernel["delay"], {"300000"})
    with hold_free_pages() as said:
        assert _settings(kernel) == ("120000", "11")
        assert "to 120000 ms" in said
    _refusing(monkeypatch, kernel["delay"], {"300000", "120000"})
    with hold_free_pages() as said:
        assert _settings(kernel) == ("0", "11")  # the order alone stops the reporting
        assert " ms" not in said and "from order 5 to 11" in said
    assert _settings(kernel) == ("0", "5")


def test_a_hold_inside_a_live_hold_leaves_the_settings_alone(kernel):
    with hold_free_pages():
        with hold_free_pages() as inner:
            assert "already held by process" in inner
        assert _settings(kernel) == ("300000", "11")  # the inner one put nothing back
    assert _settings(kernel) == ("0", "5")


def test_a_hold_after_a_killed_one_puts_back_what_the_killed_one_found(kernel):
    dead = _dead_pid()
    kernel["state"].write_text(json.dumps({"pid": dead, "delay": "0", "order": "5"}))
    kernel["delay"].write_text("300000")  # left held by the killed process
    kernel["order"].write_text("11")
    with hold_free_pages() as said:
        assert "from 0 ms to 300000 ms" in said and "from order 5 to 11" in said
    assert _settings(kernel) == ("0", "5")
    assert not kernel["state"].exists()


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_nothing_is_held_without_free_page_reporting(kernel, monkeypatch):
    monkeypatch.setattr(mod, "PAGE_REPORTING", str(kernel["delay"]) + ".missing")
    with hold_free_pages() as said:
        assert said is None
    assert _settings(kernel) == ("0", "5")
    assert not kernel["state"].exists()


def test_nothing_is_held_where_the_state_cannot_be_recorded(kernel, monkeypatch, tmp_path):
    monkeypatch.setattr(mod, "STATE", str(tmp_path / "no-such-folder" / "state.json"))
    with hold_free_pages() as said:
        assert said is None
        assert _settings(kernel) == ("0", "5")


def test_a_recorded_holder_whose_settings_are_gone_is_stale(kernel):
    # its pid is alive (reused by another process), but nothing is held any more
    kernel["state"].write_text(json.dumps({"pid": os.getpid(), "delay": "0", "order": "5"}))
    with hold_free_pages() as said:
        assert _settings(kernel) == ("300000", "11")
        assert "already held" not in said
    assert _settings(kernel) == ("0", "5")
    assert not kernel["state"].exists()
