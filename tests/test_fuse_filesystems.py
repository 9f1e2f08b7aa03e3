"""Writers on filesystems that lack features: FAT and exFAT through FUSE, casefold ext4.

FAT is mounted read-write by ``fusefat -o rw+`` (chmod and fchmod fail with
ENOSYS, link with EPERM, a growing ftruncate with EPERM, RENAME_EXCHANGE with
EINVAL, fallocate with EOPNOTSUPP; names are case-insensitive); exFAT by
``mount.exfat-fuse`` on a loop device (link, RENAME_EXCHANGE and fallocate fail
the same way; chmod is accepted and ignored). ext4 is formatted with ``-O casefold`` and names fold in a ``+F``
folder (where the kernel has utf8). Through FUSE a name spelled two ways gives
two inode numbers: identities cannot tell that ``a.onnx`` and ``A.onnx`` are one
file. exfat-fuse aborts when a file open under one spelling is unlinked under
another: the filesystem is then gone (ENOTCONN), and the next test gets a new one.

Each image is 64 MiB, made in pytest's temp dir and mounted once per module.
Root, /dev/fuse and the tools are needed (Debian: fusefat, exfat-fuse,
exfatprogs, dosfstools, fuse3, e2fsprogs): skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

MiB = 1024 * 1024
IMAGE_SIZE = 64 * MiB
FILESYSTEMS = ["fat", "exfat", "ext4-casefold"]
LEFTOVERS = (".onnx-light-tmp", ".onnx-light-old")
TOOLS = {
    "fat": {"mkfs.fat": "dosfstools", "fusefat": "fusefat", "fusermount": "fuse3"},
    "exfat": {
        "mkfs.exfat": "exfatprogs",
        "mount.exfat-fuse": "exfat-fuse",
        "losetup": "mount",
        "umount": "mount",
    },
    "ext4-casefold": {
        "mkfs.ext4": "e2fsprogs",
        "chattr": "e2fsprogs",
        "mount": "mount",
        "umount": "mount",
    },
}
CASEFOLD = "/sys/fs/ext4/features/casefold"


def _unavailable(kind: str) -> str | None:
    """Why a ``kind`` image cannot be mounted here, or None when it can be tried."""
    if os.geteuid() != 0:
        return f"mounting {kind} images needs root"
    if kind != "ext4-casefold" and not os.path.exists("/dev/fuse"):
        return f"{kind} is mounted through FUSE, and /dev/fuse is missing"
    for tool, package in TOOLS[kind].items():
        if shutil.which(tool) is None:
            return f"{tool} not found (Debian package {package})"
    if kind == "ext4-casefold" and not os.path.exists(CASEFOLD):
        return f"this kernel cannot mount casefold ext4 ({CASEFOLD} missing: no CONFIG_UNICODE)"
    return None


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        output = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {' / '.join(output)}")
    return proc.stdout.strip()


def _unmount(mnt: str, fuse: bool) -> None:
    try:
        _run(["fusermount", "-u", mnt] if fuse else ["umount", mnt])
    except RuntimeError:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


@contextlib.contextmanager
def _mounted(kind: str, root: pathlib.Path) -> Iterator[pathlib.Path]:
    """Format a fresh 64 MiB image of ``kind`` in ``root``, mount it, yield the folder
    to write in; unmount (and detach the loop device) at the end.

    Raises:
        RuntimeError: a command failed (its output is in the message).
    """
    image, mnt = root / "image", root / "mnt"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(IMAGE_SIZE)
    device = None
    mounted = False
    try:
        if kind == "fat":
            _run(["mkfs.fat", "-F", "32", str(image)])
            _run(["fusefat", "-o", "rw+", str(image), str(mnt)])  # read-only without rw+
        elif kind == "exfat":
            _run(["mkfs.exfat", str(image)])
            # as root, exfat-fuse mounts fuseblk: a block device, not an image file
            device = _run(["losetup", "--find", "--show", str(image)])
            _run(["mount.exfat-fuse", device, str(mnt)])
        else:
            _run(["mkfs.ext4", "-q", "-F", "-O", "casefold", str(image)])
            _run(["mount", "-o", "loop", str(image), str(mnt)])
        mounted = True
        folder = mnt
        if kind == "ext4-casefold":
            folder = mnt / "casefolded"
            folder.mkdir()
            _run(["chattr", "+F", str(folder)])  # names fold in an empty folder with +F
        yield folder
    finally:
        if mounted:
            _unmount(str(mnt), fuse=kind != "ext4-casefold")
        if device:
            subprocess.run(["losetup", "--detach", device], capture_output=True)


class _Image:
    """A ``kind`` image mounted in ``root``; mounted anew (a fresh image) after its FUSE
    daemon died (exfat-fuse aborts on some sequences: the test that killed it fails
    with ENOTCONN, the next ones get a live filesystem)."""

    def __init__(self, kind: str, root: pathlib.Path) -> None:
        self.kind, self.root = kind, root
        self._stack: contextlib.ExitStack | None = None
        self._mnt = root
        self._count = itertools.count()

    def folder(self) -> pathlib.Path:
        """A new empty folder on the image."""
        if self._stack is None or not _alive(self._mnt):
            self.mount()
        path = self._mnt / f"t{next(self._count)}"
        path.mkdir()
        return path

    def mount(self) -> None:
        self.close()
        where = self.root / f"image{next(self._count)}"
        where.mkdir()
        with contextlib.ExitStack() as stack:
            self._mnt = stack.enter_context(_mounted(self.kind, where))
            self._stack = stack.pop_all()

    def close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()


def _alive(path: pathlib.Path) -> bool:
    try:
        os.statvfs(path)
    except OSError:  # ENOTCONN: the FUSE daemon is gone
        return False
    return True


@pytest.fixture(scope="module", params=FILESYSTEMS)
def image(request, tmp_path_factory) -> Iterator[_Image]:
    """An image of each kind, formatted and mounted once for the module."""
    kind = request.param
    reason = _unavailable(kind)
    if reason:
        pytest.skip(reason)
    image = _Image(kind, tmp_path_factory.mktemp(kind))
    try:
        image.mount()
    except RuntimeError as e:
        pytest.skip(f"cannot mount {kind}: {e}")
    try:
        yield image
    finally:
        image.close()


@pytest.fixture
def folder(image) -> pathlib.Path:
    """A new empty folder on the mounted image, one per test."""
    return image.folder()


def _model(seed: int = 0, floats: int = 256) -> onnx.ModelProto:
    """20 float32 initializers added up, 1 KiB each by default (onnx's threshold: they
    all go to the weights file)."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal(floats, np.float32), f"W{i}") for i in range(20)
    ]
    nodes, prev = [], "X"
    for i in range(20):
        nodes.append(helper.make_node("Add", [prev, f"W{i}"], [f"H{i}"]))
        prev = f"H{i}"
    graph = helper.make_graph(
        nodes,
        "adds",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [floats])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [floats])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _save(folder: pathlib.Path, seed: int = 0) -> dict[str, np.ndarray]:
    """``m.onnx`` + ``m.onnx.data`` (aligned to 64) in ``folder``; returns the values."""
    model = _model(seed)
    options = onnxl.SerializeOptions(alignment=64)
    onnxl.save(model, folder / "m.onnx", location="m.onnx.data", options=options)
    assert os.path.getsize(folder / "m.onnx.data") >= 20 * 1024
    return _values(model)


def _check(path: pathlib.Path, expected: dict[str, np.ndarray], alignment: int = 1) -> None:
    """The model loads with the expected values, its offsets aligned; nothing left behind."""
    loaded = _values(onnxl.load(path))
    assert loaded.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    meta = onnx.load(path, load_external_data=False)
    offsets = [
        int(e.value) for t in meta.graph.initializer for e in t.external_data if e.key == "offset"
    ]
    assert len(offsets) == 20 and all(o % alignment == 0 for o in offsets)
    assert _leftovers(path.parent) == []


def _leftovers(folder: pathlib.Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(LEFTOVERS))


def _digests(folder: pathlib.Path) -> dict[str, str]:
    """Every file of ``folder`` (listed as the filesystem spells it) and its hash."""
    return {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in sorted(os.listdir(folder))
    }


def test_align_in_place(folder):
    expected = _save(folder)
    onnxl.align_external_data_streaming(
        folder / "m.onnx", folder / "m.onnx", "m.onnx.data", alignment=4096
    )
    _check(folder / "m.onnx", expected, 4096)
    assert sorted(os.listdir(folder)) == ["m.onnx", "m.onnx.data"]


def test_align_in_place_into_shards(folder):
    expected = _save(folder)
    for _ in range(2):  # the second time, the shards replace shards
        onnxl.align_external_data_streaming(
            folder / "m.onnx",
            folder / "m.onnx",
            "m.onnx.data",
            alignment=4096,
            options=onnxl.WriteOptions(max_shard_size=4 * 4096),
        )
        _check(folder / "m.onnx", expected, 4096)
    shards = {f"m-{i:05d}-of-00005.onnx.data" for i in range(1, 6)}
    assert set(os.listdir(folder)) == {"m.onnx", "m.onnx.data", *shards}  # the old file stays


def test_align_into_a_new_name(folder):
    expected = _save(folder)
    before = _digests(folder)
    onnxl.align_external_data_streaming(
        folder / "m.onnx", folder / "n.onnx", "n.onnx.data", alignment=4096
    )
    _check(folder / "n.onnx", expected, 4096)
    assert {n: d for n, d in _digests(folder).items() if n in before} == before


def test_align_weights_above_the_preallocation_size(folder):
    """5 MiB of weights: the writers preallocate (fallocate) before copying."""
    model = _model(floats=64 * 1024)
    options = onnxl.SerializeOptions(alignment=64)
    onnxl.save(model, folder / "b.onnx", location="b.onnx.data", options=options)
    onnxl.align_external_data_streaming(folder / "b.onnx", folder / "b.onnx", "b.onnx.data")
    _check(folder / "b.onnx", _values(model), 4096)


def test_save_over_existing_files(folder):
    _save(folder, seed=0)
    expected = _save(folder, seed=1)
    _check(folder / "m.onnx", expected, 64)
    assert sorted(os.listdir(folder)) == ["m.onnx", "m.onnx.data"]


def _case_insensitive(folder: pathlib.Path) -> bool:
    probe = folder / "case-probe"
    probe.touch()
    try:
        return (folder / "CASE-PROBE").exists()
    finally:
        probe.unlink()


@pytest.fixture
def writes(folder, monkeypatch):
    """Records the files of ``folder`` that hold bytes when closed while
    ``writes.watch()`` runs (reserving an empty temporary name is not writing).
    The case-folding tests only: skipped where names are case-sensitive."""
    if not _case_insensitive(folder):
        pytest.skip("names are case-sensitive here")
    return _Writes(str(folder), monkeypatch)


class _Writes:
    def __init__(self, folder: str, monkeypatch) -> None:
        self.folder, self.monkeypatch = folder, monkeypatch

    @contextlib.contextmanager
    def watch(self) -> Iterator[list[str]]:
        real_open, real_close = os.open, os.close
        flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC
        opened: dict[int, str] = {}
        written: list[str] = []

        def spy_open(path, flag, *args, **kwargs):
            fd = real_open(path, flag, *args, **kwargs)
            name = os.path.abspath(os.fsdecode(path))
            if flag & flags and os.path.dirname(name) == self.folder:
                opened[fd] = os.path.basename(name)
            return fd

        def spy_close(fd):
            name = opened.pop(fd, None)
            if name is not None:
                with contextlib.suppress(OSError):  # ENOTCONN: the FUSE daemon died
                    if os.fstat(fd).st_size:
                        written.append(name)
            return real_close(fd)

        with self.monkeypatch.context() as m:
            m.setattr(os, "open", spy_open)
            m.setattr(os, "close", spy_close)
            yield written


def _names(message: str, *names: str) -> bool:
    """Whether ``message`` names each file as spelled (``m.onnx`` is not ``m.onnx.data``)."""
    return all(re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w.-])", message) for n in names)


@pytest.mark.parametrize(
    ("dst", "weights", "existing", "names"),
    [
        # the two destinations of the call are one file
        ("a.onnx", "A.onnx", None, ("a.onnx", "A.onnx")),
        ("a.onnx", "A.onnx", "a.onnx", ("a.onnx", "A.onnx")),
        # a destination is a source file spelled another way
        ("n.onnx", "M.ONNX.DATA", None, ("M.ONNX.DATA",)),
        ("M.onnx.data", "n.onnx.data", None, ("M.onnx.data",)),
        ("n.onnx", "M.onnx", None, ("M.onnx",)),
    ],
    ids=["new", "existing", "source-weights", "model-on-weights", "model"],
)
def test_align_refuses_names_that_fold_together(folder, writes, dst, weights, existing, names):
    """Two names of one file under case folding are refused before anything is written
    (the message names the files as the caller spelled them): no file appears, the
    source and the existing files are unchanged."""
    _save(folder)
    if existing:
        (folder / existing).write_bytes(b"keep me")
    before = _digests(folder)
    with writes.watch() as written, pytest.raises(ValueError) as info:
        onnxl.align_external_data_streaming(
            folder / "m.onnx", folder / dst, weights, alignment=4096
        )
    assert _names(str(info.value), *names), str(info.value)
    assert written == [], f"written before the refusal: {written}"
    assert _digests(folder) == before
    assert _leftovers(folder) == []


def test_save_refuses_names_that_fold_together(folder, writes):
    with writes.watch() as written, pytest.raises(ValueError) as info:
        onnxl.save(_model(), folder / "x.onnx", location="X.ONNX")
    assert _names(str(info.value), "x.onnx", "X.ONNX"), str(info.value)
    assert written == [], f"written before the refusal: {written}"
    assert os.listdir(folder) == []


@pytest.mark.parametrize(
    ("dst", "weights"),
    [("m.onnx", "M.ONNX.DATA"), ("M.ONNX", "M.ONNX.DATA"), ("M.ONNX", "m.onnx.data")],
    ids=["weights", "both", "model"],
)
def test_align_in_place_spelled_another_way(folder, writes, dst, weights):
    """The source's own files named in another case: either refused before anything
    is written (naming a file as spelled), or re-aligned in place (two files left,
    loading the same values)."""
    expected = _save(folder)
    before = _digests(folder)
    try:
        with writes.watch() as written:
            onnxl.align_external_data_streaming(
                folder / "m.onnx", folder / dst, weights, alignment=4096
            )
    except ValueError as e:
        assert _names(str(e), dst) or _names(str(e), weights), str(e)
        assert written == [], f"written before the refusal: {written}"
        assert _digests(folder) == before
    else:
        assert len(os.listdir(folder)) == 2, os.listdir(folder)
        _check(folder / "m.onnx", expected, 4096)
    assert _leftovers(folder) == []
