"""The ``onnx-light`` command line (also ``python -m onnx_light``).

Three verbs on a model file::

    onnx-light align SRC.onnx DST.onnx [--weights PATH] [--alignment 4096]
    onnx-light info MODEL.onnx [--json]
    onnx-light verify MODEL.onnx

``align`` streams the weights into one aligned file without loading them,
``info`` lists every tensor and where its bytes live, ``verify`` checks every
external reference. Errors print one line, ``onnx-light: error: ...``, on
stderr: exit code 1 for a failure, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

import onnx

import onnx_light
import onnx_light.onnx as onnxl
from onnx_light.onnx._external import Resolver, check_location
from onnx_light.onnx._tensors import is_external, iter_tensors, path_to_str, tensor_nbytes

PROG = "onnx-light"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _size(text: str) -> int:
    """Parse a byte count: ``4096``, ``64K``, ``4M``, ``1GiB`` (powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = t[-1:] if t[-1:] in _UNITS else ""
    try:
        value = int(t[: len(t) - len(unit)]) * _UNITS[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def _alignment(text: str) -> int:
    value = _size(text)
    if value < 1 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"must be a power of two >= 1, got {text!r}")
    return value


def _chunk(text: str) -> int:
    value = _size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _human(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


class _Progress:
    """A ``progress(done, total)`` callback drawing a bar on stderr.

    Uses tqdm when it is installed, else a one-line text bar redrawn in place.

    Args:
        label: shown before the bar.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar = None
        self.last = 0
        self.drawn = -1.0
        try:
            import tqdm
        except ImportError:
            self.tqdm = None
        else:
            self.tqdm = tqdm.tqdm

    def __call__(self, done: int, total: int) -> None:
        if self.tqdm is not None:
            if self.bar is None:
                self.bar = self.tqdm(
                    total=total,
                    desc=self.label,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    file=sys.stderr,
                    leave=False,
                )
            self.bar.update(done - self.last)
            self.last = done
            return
        now = time.monotonic()
        if done < total and now - self.drawn < 0.1:
            return
        self.drawn = now
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {frac:4.0%} {_human(done)}/{_human(total)}")
        sys.stderr.flush()
        self.last = done

    def close(self) -> None:
        """Remove the tqdm bar, or end the text bar's line."""
        if self.bar is not None:
            self.bar.close()
        elif self.tqdm is None and self.drawn >= 0:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _location(tensor: onnx.TensorProto) -> str:
    for entry in tensor.external_data:
        if entry.key == "location":
            return entry.value
    return ""


def cmd_align(args: argparse.Namespace) -> int:
    """Run ``onnx-light align``.

    Args:
        args: the parsed arguments (src, dst, weights, alignment, chunk_size,
            size_threshold, quiet).

    Returns:
        The exit code, 0.
    """
    if os.path.isdir(args.dst):  # checked here: the library would leave DST.data behind
        raise IsADirectoryError(f"destination {args.dst!r} is a folder, give a .onnx file path")
    weights = args.weights or os.path.basename(args.dst) + ".data"
    show = not args.quiet and sys.stderr.isatty()
    progress = _Progress(f"align {os.path.basename(args.src)}") if show else None
    start = time.perf_counter()
    try:
        written = onnxl.align_external_data_streaming(
            args.src,
            args.dst,
            weights,
            args.alignment,
            args.chunk_size,
            size_threshold=args.size_threshold,
            progress=progress,
        )
    finally:
        if progress is not None:
            progress.close()
    elapsed = time.perf_counter() - start
    if not args.quiet:
        # Count from the metadata only: inline raw_data turns into references
        # into the .onnx itself, which are not counted.
        own = os.path.basename(args.dst)
        model = onnxl.load(args.dst, load_external_data=False, skip_raw_data=True)
        n = sum(
            1 for s in iter_tensors(model) if is_external(s.tensor) and _location(s.tensor) != own
        )
        target = (
            weights
            if os.path.dirname(weights)
            else os.path.join(os.path.dirname(args.dst), weights)
        )
        print(
            f"wrote {written} bytes ({_human(written)}) for {n} tensors to {target} "
            f"aligned to {args.alignment} in {elapsed:.2f} s"
        )
    return 0


def _int_or_raw(value: str | None) -> int | str | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return value


def _pow2(offset: object) -> int | None:
    """The largest power of two dividing ``offset`` (None for 0, unknown or inline)."""
    if not isinstance(offset, int) or offset <= 0:
        return None
    return offset & -offset


def _file_size(base: str, location: str) -> int | None:
    """Size of the file behind a safe ``location``, None when missing or unsafe."""
    try:
        check_location(location, "")
        return os.stat(os.path.join(base, location)).st_size
    except (OSError, ValueError):
        return None


def model_info(path: str) -> dict:
    """Describe every tensor of a model and where its bytes live, weights unread.

    Args:
        path: the ``.onnx`` file.

    Returns:
        A JSON-ready dict: ``model``, ``tensors`` (name, path, dtype, shape,
        location (None when inline), offset, length, offset_pow2), ``files``
        (location, tensors, bytes referenced, file_size: the size on disk, None
        when missing or unsafe), ``external_tensors``, ``alignment`` (the
        largest power of two dividing every external offset, None without
        any nonzero offset) and ``aligned`` ({"4096": bool, "65536": bool}).
    """
    model = onnxl.load(path, load_external_data=False)
    base = os.path.dirname(os.path.abspath(path))
    tensors, files = [], {}
    for site in iter_tensors(model):
        t = site.tensor
        try:
            dtype = onnx.TensorProto.DataType.Name(t.data_type)
        except ValueError:
            dtype = str(t.data_type)
        if is_external(t):
            entries = {e.key: e.value for e in t.external_data}
            location = entries.get("location", "")
            offset = _int_or_raw(entries.get("offset", "0"))
            length = _int_or_raw(entries.get("length"))
            if length is None:
                length = tensor_nbytes(t)
        else:
            location, offset = None, None
            length = len(t.raw_data) if t.HasField("raw_data") else tensor_nbytes(t)
        tensors.append(
            {
                "name": t.name or site.label,
                "path": path_to_str(site.path),
                "dtype": dtype,
                "shape": list(t.dims),
                "location": location,
                "offset": offset,
                "length": length,
                "offset_pow2": _pow2(offset),
            }
        )
        if location not in files:  # None: inline, in the .onnx itself
            size = None if location is None else _file_size(base, location)
            files[location] = {"location": location, "tensors": 0, "bytes": 0, "file_size": size}
        entry = files[location]
        entry["tensors"] += 1
        entry["bytes"] += length if isinstance(length, int) else 0
    external = [t for t in tensors if t["location"] is not None]
    offsets = [t["offset"] for t in external]
    alignment = None
    if all(isinstance(o, int) for o in offsets) and any(offsets):
        alignment = min(_pow2(o) for o in offsets if o)
    aligned = {
        str(a): all(isinstance(o, int) and o % a == 0 for o in offsets) for a in (4096, 65536)
    }
    return {
        "model": path,
        "tensors": tensors,
        "files": list(files.values()),
        "external_tensors": len(external),
        "alignment": alignment,
        "aligned": aligned,
    }


def _printable(text: str) -> str:
    """``text`` with its control characters escaped.

    Names in a model come from strangers: printed raw, an escape sequence or a
    new line in them would drive the terminal or forge output lines.
    """
    return text if text.isprintable() else repr(text)[1:-1]


def _table(rows: list[list[str]], right: set[int]) -> str:
    """Align ``rows`` in columns, right-justifying the column indices in ``right``."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    """Run ``onnx-light info``: print the tensor table, or JSON with ``--json``.

    Args:
        args: the parsed arguments (model, json).

    Returns:
        The exit code, 0.
    """
    info = model_info(args.model)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0

    def cell(v: object, none: str = "-") -> str:
        return none if v is None else _printable(str(v))

    rows = [["name", "dtype", "shape", "location", "offset", "length", "offset 2^k"]]
    for t in info["tensors"]:
        inline = t["location"] is None
        pow2 = "-" if inline or not isinstance(t["offset"], int) else cell(t["offset_pow2"], "any")
        rows.append(
            [
                _printable(t["name"]),
                t["dtype"],
                str(t["shape"]),
                cell(t["location"], "inline"),
                cell(t["offset"]),
                cell(t["length"]),
                pow2,
            ]
        )
    print(f"{info['model']}: {len(info['tensors'])} tensors, {info['external_tensors']} external")
    print(_table(rows, {4, 5, 6}))
    print()
    files = [["file", "tensors", "bytes", "file size"]]
    for f in info["files"]:
        size = f["file_size"]
        files.append(
            [
                cell(f["location"], "inline"),
                str(f["tensors"]),
                f"{f['bytes']} ({_human(f['bytes'])})",
                "-" if size is None else f"{size} ({_human(size)})",
            ]
        )
    print(_table(files, {1, 2, 3}))
    print()
    if info["external_tensors"]:
        print(f"common alignment of external offsets: {cell(info['alignment'], 'any')}")
    for a, ok in info["aligned"].items():
        note = " (no external tensors)" if not info["external_tensors"] else ""
        print(f"aligned to {a}: {'yes' if ok else 'no'}{note}")
    return 0


def verify_model(path: str) -> tuple[int, list[str]]:
    """Check every external reference of a model: resolves, safe, in range, dtype x dims.

    Args:
        path: the ``.onnx`` file.

    Returns:
        ``(number of external tensors, problems)``, one message per bad tensor.

    Raises:
        FileNotFoundError, ValueError: the model itself cannot be read.
    """
    model = onnxl.load(path, load_external_data=False)
    resolver = Resolver(os.path.dirname(os.path.abspath(path)))
    count, problems = 0, []
    for site in iter_tensors(model):
        if not is_external(site.tensor):
            continue
        count += 1
        try:
            resolver.resolve(site)
        except (OSError, ValueError) as e:
            problems.append(str(e))
    return count, problems


def cmd_verify(args: argparse.Namespace) -> int:
    """Run ``onnx-light verify``: one line per problem on stdout.

    Args:
        args: the parsed arguments (model).

    Returns:
        0 when every reference is valid, else 1.
    """
    count, problems = verify_model(args.model)
    for p in problems:
        print(p)
    if problems:
        print(f"{PROG}: error: {len(problems)} bad reference(s) in {args.model}", file=sys.stderr)
        return 1
    print(f"OK {args.model}: {count} external tensors, every reference valid")
    return 0


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``onnx-light`` argument parser, with its three subcommands.

    Returns:
        An :class:`argparse.ArgumentParser`; each subcommand sets ``func``.
    """
    parser = _Parser(
        prog=PROG,
        description="Inspect, check and re-align ONNX models with external data, "
        "without loading their weights in memory.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {onnx_light.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "align",
        help="copy a model into a new (.onnx, weights) pair with aligned offsets",
        description="Stream every external tensor of SRC into ONE weights file, each at an "
        "offset multiple of --alignment; write DST pointing at it. Weights never sit in RAM.",
    )
    p.add_argument("src", metavar="SRC.onnx", help="the model to re-align")
    p.add_argument("dst", metavar="DST.onnx", help="the new model (may be SRC: in place)")
    p.add_argument(
        "--weights",
        metavar="PATH",
        help="the new weights file, next to or inside DST's folder (default: DST.onnx.data)",
    )
    p.add_argument(
        "--alignment",
        type=_alignment,
        default=4096,
        metavar="BYTES",
        help="a power of two (default: 4096)",
    )
    p.add_argument(
        "--chunk-size",
        type=_chunk,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="bytes per copy call, e.g. 4M (default: 4 MiB)",
    )
    p.add_argument(
        "--size-threshold",
        type=_size,
        default=None,
        metavar="BYTES",
        help="also move inline tensors of at least BYTES into the weights file",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    p.set_defaults(func=cmd_align)

    p = sub.add_parser(
        "info",
        help="list every tensor, where its bytes live and how they are aligned",
        description="A table of every tensor (name, dtype, shape, location, offset, length, "
        "the largest power of two dividing the offset), totals per file, and whether "
        "the model is aligned to 4096 / 65536. Weights are not read.",
    )
    p.add_argument("model", metavar="MODEL.onnx")
    p.add_argument("--json", action="store_true", help="print a JSON document instead")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "verify",
        help="check that every external reference is valid",
        description="Check every external reference: the file exists and stays inside the "
        "model's folder, the range fits in it and matches dtype x dims. Exit 0 when all "
        "are valid, else 1 with one line per problem.",
    )
    p.add_argument("model", metavar="MODEL.onnx")
    p.set_defaults(func=cmd_verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``onnx-light`` command.

    Args:
        argv: the arguments, without the program name (default: ``sys.argv[1:]``).

    Returns:
        The exit code: 0 on success, 1 on a failure, 2 on bad usage.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, bad usage
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `onnx-light info --json m.onnx | head`
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (OSError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
