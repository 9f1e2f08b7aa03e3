"""The ``onnx-light`` command line (also ``python -m onnx_light``).

Four verbs on model files::

    onnx-light align SRC.onnx DST.onnx [--weights PATH] [--alignment 4096]
    onnx-light dedup SRC.onnx [SRC2.onnx ...] (--out DIR | --in-place) [--weights NAME]
    onnx-light info MODEL.onnx [MODEL2.onnx ...] [--json] [--twins]
    onnx-light verify MODEL.onnx [MODEL2.onnx ...]

``align`` streams the weights into one aligned file without loading them,
``dedup`` writes models that share one weights file, each distinct byte
string once, ``info`` lists every tensor and where its bytes live (and the
ranges several tensors read, within and across the models given),
``verify`` checks every external reference. Errors print one line,
``onnx-light: error: ...``, on stderr: exit code 1 for a failure, 2 for bad
usage.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import time

import onnx_light
from onnx_light._inspect import (
    listed,
    model_info,
    shared_across,
    transposed_pairs,
    verify_models,
)
from onnx_light._loaders import loader_verdicts
from onnx_light._progress import Progress, human, rate
from onnx_light.onnx import (
    AlignResult,
    DedupResult,
    align_external_data_streaming,
    deduplicate_external_data,
)
from onnx_light.onnx._layout import SHARD_NAMINGS
from onnx_light.onnx._options import (
    check_alignment,
    check_chunk_size,
    check_max_shard_size,
    check_size_threshold,
)
from onnx_light.onnx._targets import is_in_place

PROG = "onnx-light"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
# ASCII digits, then K, M, G or T with an optional i, then an optional B, in
# any case. re.ASCII: no other digits (int() takes them, and '_'), and no
# KELVIN SIGN for K (it matches 'k' when case-folded in Unicode mode).
_SIZE = re.compile(r"(-?)([0-9]+)(?:([KMGT])I?)?B?", re.ASCII | re.IGNORECASE)


def _byte_count(text: str) -> int:
    """Parse a byte count: ``4096``, ``64K``, ``4M``, ``1GiB`` (powers of 1024).

    A leading ``-`` is read, so that the range checks can say what the bound is.

    Raises:
        argparse.ArgumentTypeError: ``text`` is not a byte count.
    """
    match = _SIZE.fullmatch(text.strip())
    try:
        if match is None:
            raise ValueError(text)
        sign, digits, unit = match.groups()
        value = int(digits)  # ValueError past sys.get_int_max_str_digits() digits
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte count: {text!r}") from None
    return value * _UNITS[(unit or "").upper()] * (-1 if sign else 1)


def _checked(check, text: str) -> int:
    """A byte count, checked by the library's own rule for that setting (one
    validation for the API and the command line): its error is a usage error."""
    try:
        return check(_byte_count(text))
    except (TypeError, ValueError) as e:
        reason = e.args[0].split(" must ", 1)[-1]
        raise argparse.ArgumentTypeError(f"must {reason} ({text!r})") from None


def _size(text: str) -> int:
    return _checked(check_size_threshold, text)


def _alignment(text: str) -> int:
    """An alignment, as the library takes it: 0 (dense) or a power of two up to 1 GiB."""
    value = _byte_count(text)
    _checked(check_alignment, text)
    return value


def _chunk(text: str) -> int:
    return _checked(check_chunk_size, text)


def _shard(text: str) -> int:
    return _checked(check_max_shard_size, text)


def _output(text: str) -> str:
    """An output path: ``-`` is refused (it would name a file, not stdout)."""
    if text == "-":
        raise argparse.ArgumentTypeError(
            "'-': writing to stdout is not supported, name a file (./- for a file named '-')"
        )
    return text


def _with_progress(args: argparse.Namespace, label: str, call):
    """``call(progress)`` with a progress bar on a terminal (not with ``-q``).

    Returns:
        ``(what the call returned, seconds it took)``.
    """
    show = not args.quiet and sys.stderr.isatty()
    progress = Progress(label) if show else None
    start = time.perf_counter()
    try:
        result = call(progress)
    finally:
        if progress is not None:
            progress.close()
    return result, time.perf_counter() - start


def cmd_align(args: argparse.Namespace) -> int:
    """Run ``onnx-light align``.

    Args:
        args: the parsed arguments (src, dst, weights, alignment, chunk_size,
            size_threshold, quiet).

    Returns:
        The exit code, 0.
    """
    result, elapsed = _with_progress(
        args,
        f"align {os.path.basename(args.src)}",
        lambda progress: align_external_data_streaming(
            args.src,
            args.dst,
            args.weights,
            args.alignment,
            args.chunk_size,
            size_threshold=args.size_threshold,
            progress=progress,
            max_shard_size=args.max_shard_size,
            inline_below=args.inline_below,
            shard_naming=args.shard_naming,
            remove_unreferenced=args.prune,
            durable=args.durable,
            drop_behind=args.drop_behind,
            rewrite=args.rewrite,
        ),
    )
    if not args.quiet:
        print(_align_summary(args, result, elapsed))
    return 0


def _align_summary(args: argparse.Namespace, result: AlignResult, elapsed: float) -> str:
    """What ``align`` did, in one or two lines (from the result: nothing is read again)."""
    note = ""
    if args.size_threshold is None and result.threshold is not None:
        note = (
            f"single-file model: inline tensors of {result.threshold} bytes or more moved "
            "(--size-threshold sets another limit)\n"
        )
    if not result.rewritten:
        files = ", ".join(_printable(os.path.basename(p)) for p in result.weights_paths)
        return (
            f"{_printable(args.dst)} is already as this align would write it ({result.moved} "
            f"tensors in {files}, offsets multiples of {args.alignment}): nothing written "
            "(--rewrite writes it again)"
        )
    if not result.moved:
        limit = "" if result.threshold is None else f" of {result.threshold} bytes or more"
        line = (
            f"{note}no tensor{limit} to move: wrote {_printable(args.dst)} alone, "
            f"no weights file, in {elapsed:.2f} s"
        )
        return "\n".join([line, *_more(result, args)])
    where = _printable(result.weights_paths[0])
    if len(result.weights_paths) > 1:
        where = f"{len(result.weights_paths)} shards ({where}, ...)"
    typed = f" ({result.typed} from typed fields such as float_data)" if result.typed else ""
    lines = [
        f"{note}wrote {result.size} bytes ({human(result.size)}) for {result.moved} tensors"
        f"{typed} to {where} {_aligned(args.alignment)} in {elapsed:.2f} s "
        f"({rate(result.size, elapsed)})"
    ]
    return "\n".join(lines + _more(result, args))


def _aligned(alignment: int) -> str:
    return "dense (no alignment)" if alignment in (0, 1) else f"aligned to {alignment}"


def _more(result: AlignResult, args: argparse.Namespace) -> list[str]:
    """The lines about tensors brought back inline and files left behind."""
    lines = []
    if args.prune and os.path.abspath(args.src) != os.path.abspath(args.dst):
        lines.append("--prune: nothing to prune, the source was not replaced (not in place)")
    if result.inlined:
        lines.append(f"{result.inlined} small external tensors written inline (--inline-below)")
    return lines + _left_over(result)


def cmd_dedup(args: argparse.Namespace) -> int:
    """Run ``onnx-light dedup``.

    Args:
        args: the parsed arguments (sources, out, in_place, weights,
            alignment, chunk_size, size_threshold, max_shard_size, reuse,
            prune, quiet).

    Returns:
        The exit code, 0.

    Raises:
        ValueError: two sources share a name with ``--out``, the folder is
            missing, or ``--out`` is the sources' own folder.
    """
    srcs, dsts = args.sources, _dedup_destinations(args)
    extra = _exporter_files(srcs) if args.out else []
    weights = args.weights  # None: the library's default (in place, the name already used)
    label = os.path.basename(srcs[0]) if len(srcs) == 1 else f"{len(srcs)} models"
    result, elapsed = _with_progress(
        args,
        f"dedup {label}",
        lambda progress: deduplicate_external_data(
            srcs,
            dsts,
            weights,
            alignment=args.alignment,
            size_threshold=args.size_threshold,
            max_shard_size=args.max_shard_size,
            progress=progress,
            reuse=args.reuse,
            remove_unreferenced=args.prune,
            chunk_size=args.chunk_size,
            durable=args.durable,
            drop_behind=args.drop_behind,
        ),
    )
    copied = _bring_files(extra, args.out) if args.with_files else []
    if not args.quiet:
        print(_dedup_summary(args, result, len(srcs), elapsed))
        for line in _out_notes(args, dsts, extra, copied):
            print(line)
    return 0


def _out_notes(
    args: argparse.Namespace, dsts: list[str], extra: list[str], copied: list[str]
) -> list[str]:
    """What ``dedup --out`` named otherwise, and the exporter's files: copied, or not."""
    lines = []
    renamed = [
        f"{_printable(s)} -> {_printable(os.path.basename(d))}"
        for s, d in zip(args.sources, dsts, strict=True)
        if os.path.basename(s) != os.path.basename(d)
    ]
    if renamed:
        lines.append(f"written as: {', '.join(renamed)}")
    if copied:
        lines.append(f"copied beside them: {', '.join(_printable(n) for n in copied)}")
    elif extra and not args.with_files:
        names = [os.path.basename(p) for p in extra]
        shown = ", ".join(_printable(n) for n in names[:3])
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        lines.append(
            f"the sources' folder also holds {shown}{more}, which loaders such as optimum's "
            "ORTModel and onnxruntime-genai read beside the models: --with-files copies them"
        )
    return lines


def _dedup_destinations(args: argparse.Namespace) -> list[str]:
    """One destination per source: itself (``--in-place``), or ``DIR/<name>``: the name
    given (``--names``), else its file name, else, when two sources share a file name
    (onnxruntime-genai writes every model as ``model.onnx`` in a folder of its own),
    ``<its folder's name>_<its file name>``."""
    if args.in_place:
        if args.names:
            raise ValueError("--names names the models written with --out, not in place")
        return list(args.sources)
    folder = args.out
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ValueError(f"--out {folder}: {what} (create the folder first)")
    names = _output_names(args.sources, args.names)
    dsts = [os.path.join(folder, name) for name in names]
    for src, dst in zip(args.sources, dsts, strict=True):
        if os.path.exists(src) and is_in_place(os.path.abspath(src), os.path.abspath(dst)):
            raise ValueError(
                f"--out {folder} is the folder of {src}: the models would replace themselves; "
                "pass --in-place instead to deduplicate them in place"
            )
    return dsts


def _output_names(sources: list[str], given: list[str] | None) -> list[str]:
    """The file names of the models ``dedup --out`` writes.

    Raises:
        ValueError: ``--names`` does not give one plain ``.onnx`` name per source,
            or two sources would get one name.
    """
    if given:
        if len(given) != len(sources):
            n = len(given)
            raise ValueError(f"--names gives {n} {_plural(n, 'name')} for {len(sources)} models")
        bad = [n for n in given if os.path.basename(n) != n or not n.endswith(".onnx")]
        if bad:
            raise ValueError(f"--names {bad[0]}: a file name ending in .onnx, without a folder")
        names = list(given)
    else:
        names = [os.path.basename(s) for s in sources]
        if len(set(names)) < len(names):  # genai's layout: model.onnx in each folder
            names = [
                f"{os.path.basename(os.path.dirname(os.path.abspath(s)))}_{os.path.basename(s)}"
                for s in sources
            ]
    seen: dict[str, str] = {}
    for src, name in zip(sources, names, strict=True):
        if name in seen:
            raise ValueError(
                f"{seen[name]} and {src} would both be written as {name}: name the outputs "
                "with --names (one .onnx name per model)"
            )
        seen[name] = src
    return names


EXPORTER_FILES = (".json", ".txt", ".model", ".tiktoken", ".jinja")  # configs, tokenizers


def _exporter_files(sources: list[str]) -> list[str]:
    """The exporter's other files beside the sources (config.json, generation_config.json,
    tokenizer files, genai_config.json...): what a loader reads beside the models; never a
    model or a weights file."""
    found: dict[str, str] = {}
    for folder in dict.fromkeys(os.path.dirname(os.path.abspath(s)) for s in sources):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(EXPORTER_FILES) and os.path.isfile(path):
                found.setdefault(name, path)  # the first source's folder wins
    return list(found.values())


def _bring_files(files: list[str], folder: str) -> list[str]:
    """Copy ``files`` into ``folder`` (an existing file of that name is kept).

    Returns:
        The names copied.
    """
    copied = []
    for path in files:
        target = os.path.join(folder, os.path.basename(path))
        if os.path.lexists(target):
            continue
        shutil.copyfile(path, target)
        copied.append(os.path.basename(path))
    return copied


def _dedup_summary(
    args: argparse.Namespace, result: DedupResult, models: int, elapsed: float
) -> str:
    """What ``dedup`` did, a few lines (from the result: nothing is read again)."""
    before, saved = result.bytes_before, result.bytes_saved
    plural = "model" if models == 1 else "models"
    if saved >= 0:
        gain = f"{_percent(saved, before)} saved ({saved} of {before} bytes)"
    else:
        gain = (
            f"nothing saved: {-saved} bytes more than before (alignment padding; "
            "--alignment 0 packs the tensors densely)"
        )
    lines = [
        f"deduplicated {models} {plural} in {elapsed:.2f} s ({rate(before, elapsed)} of tensors "
        f"read): {human(before)} of tensors -> "
        f"{human(result.bytes_written)} written + {human(result.bytes_reused)} reused, {gain}"
    ]
    shared = sum(len(g) for g in result.groups)
    if result.groups:
        ranges = (
            "1 range is" if len(result.groups) == 1 else f"{len(result.groups)} ranges are each"
        )
        lines.append(f"{ranges} read by several tensors ({shared} tensors)")
    else:
        lines.append("no two tensors hold the same bytes: each keeps its own range")
    if result.transposed:
        several = models > 1

        def name(t: tuple[str, str]) -> str:
            model, tensor = t
            return f"{os.path.basename(model)}:{tensor}" if several else tensor

        pairs = ", ".join(f"{name(a)!r} / {name(b)!r}" for a, b, _ in result.transposed[:3])
        more = f" and {len(result.transposed) - 3} more" if len(result.transposed) > 3 else ""
        nbytes = sum(n for _, _, n in result.transposed)
        twins = "twin" if len(result.transposed) == 1 else "twins"
        lines.append(
            f"{len(result.transposed)} transposed {twins} kept ({human(nbytes)}; "
            f"sharing them needs a graph change): {_printable(pairs)}{more}"
        )
    if result.weights_paths:
        where = _printable(result.weights_paths[0])
        if len(result.weights_paths) > 1:
            where = f"{len(result.weights_paths)} shards ({where}, ...)"
        lines.append(f"weights: {where} {_aligned(args.alignment)}")
    elif result.bytes_reused:
        lines.append("weights: none written, every tensor points into a reused file")
    else:
        lines.append(
            f"weights: none written, no tensor of {args.size_threshold} bytes or more to move "
            "(smaller ones stay in their model)"
        )
    if args.prune and not args.in_place:
        lines.append("--prune: nothing to prune, the sources were not replaced (not in place)")
    lines.extend(_left_over(result))
    return "\n".join(lines)


def _percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage with the digits that matter: 43%, 4.2%, 0.38%."""
    if not whole or not part:
        return "0%"
    p = 100 * part / whole
    if p >= 10:
        return f"{p:.0f}%"
    return f"{p:.2g}%" if p < 1 else f"{p:.1f}%"


def _left_over(result: AlignResult | DedupResult) -> list[str]:
    """The line about the weights files left behind by an in-place run, if any."""
    names = ", ".join(_printable(os.path.basename(p)) for p in result.unreferenced)
    if result.removed:
        n = len(result.removed)
        return [f"removed {n} weights {_plural(n, 'file')} no model references: {names}"]
    if result.unreferenced:
        n = len(result.unreferenced)
        return [
            f"{n} weights {_plural(n, 'file')} no .onnx of the folder references any "
            f"more: {names} (--prune removes {'it' if n == 1 else 'them'})"
        ]
    return []


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

    With several models, each model's report in turn, then the ranges
    tensors of several models read (JSON: ``{"models": [...],
    "shared_ranges": [...], "transposed": ...}``).

    Args:
        args: the parsed arguments (model: a list, json, twins).

    Returns:
        The exit code, 0.
    """
    infos = [model_info(path) for path in args.model]
    several = len(infos) > 1
    shared = shared_across(infos) if several else infos[0]["shared_ranges"]
    infos = [listed(info, args.external, args.min_size) for info in infos]
    # None: not looked for (it reads the weights); []: looked for, none found
    transposed = transposed_pairs(args.model) if args.twins else None
    if not several and transposed is not None:
        transposed = [{**p, "tensors": [t["name"] for t in p["tensors"]]} for p in transposed]
    if args.json:
        if several:
            doc = {"models": infos, "shared_ranges": shared, "transposed": transposed}
        else:
            doc = {**infos[0], "transposed": transposed}
        print(json.dumps(doc, indent=2))
        return 0
    for k, info in enumerate(infos):
        if k:
            print()
        _print_info(info)
    name = _tensor_namer(args.model)
    if shared:
        print()
        across = " of these models" if several else ""
        print(_sharing(shared, across))
        ranges = [["location", "offset", "length", "read by"]]
        for r in shared:
            names = ", ".join(name(t) for t in r["tensors"])
            ranges.append([_printable(r["location"]), str(r["offset"]), str(r["length"]), names])
        print(_table(ranges, {1, 2}))
    if transposed is not None:
        print()
        found = len(transposed) or "none"
        print(f"transposed twins (2-D tensors stored as the transpose of another): {found}")
        for p in transposed:
            a, b = (name(t) for t in p["tensors"])
            print(f"  {a} / {b}: {p['length']} bytes each ({human(p['length'])})")
    return 0


def _tensor_namer(models: list[str]):
    """How tensors are shown: their name, prefixed by their model's file name
    (or path, when two models share a file name) when there are several models."""
    basenames = [os.path.basename(m) for m in models]
    unique = len(set(basenames)) == len(basenames)

    def name(t: str | dict) -> str:
        if isinstance(t, str):
            return _printable(t)
        model = os.path.basename(t["model"]) if unique else t["model"]
        return _printable(f"{model}:{t['name']}")

    return name


def _print_info(info: dict) -> None:
    """One model: a summary (tensors by place, bytes per file, alignment, shared ranges),
    the files, then the tensor table (as filtered)."""

    def cell(v: object, none: str = "-") -> str:
        return none if v is None else _printable(str(v))

    for line in _info_summary(info):
        print(line)
    print()
    files = [["file", "tensors", "bytes", "file size"]]
    for f in info["files"]:
        size = f["file_size"]
        shown_size = "-" if size is None else f"{size} ({human(size)})"
        files.append(
            [
                cell(f["location"], "inline"),
                str(f["tensors"]),
                f"{f['bytes']} ({human(f['bytes'])})",
                "missing" if f.get("missing") else shown_size,
            ]
        )
    print(_table(files, {1, 2, 3}))
    print()
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
    shown = info.get("listed", {})
    if shown.get("external_only") or shown.get("min_size"):
        what = " external" if shown.get("external_only") else ""
        size = f" of at least {shown['min_size']} bytes" if shown.get("min_size") else ""
        print(
            f"{len(info['tensors'])} of {info['tensor_count']} tensors listed:{what} tensors{size}"
        )
    print(_table(rows, {4, 5, 6}))


def _info_summary(info: dict) -> list[str]:
    """The lines that lead ``info``: what a reader looks for first."""
    external_files = [f for f in info["files"] if f["location"] is not None]
    external_bytes = sum(f["bytes"] for f in external_files)
    count = len(external_files)
    lines = [
        f"{_printable(info['model'])}: {info['tensor_count']} "
        f"{_plural(info['tensor_count'], 'tensor')}, "
        f"{info['external_tensors']} external ({human(external_bytes)} in {count} "
        f"{_plural(count, 'file')}), {info['inline_tensors']} inline "
        f"({human(info['inline_bytes'])})"
    ]
    if info["external_tensors"]:
        common = "any" if info["alignment"] is None else str(info["alignment"])
        lines.append(f"common alignment of external offsets: {common}")
    note = " (no external tensors)" if not info["external_tensors"] else ""
    for a, ok in info["aligned"].items():
        lines.append(f"aligned to {a}: {'yes' if ok else 'no'}{note}")
    shared = info["shared_ranges"]
    if shared:
        lines.append(f"{len(shared)} {_plural(len(shared), 'range')} read by several tensors")
    for location in info["missing_files"]:
        lines.append(
            f"missing: {_printable(location)} does not exist (onnx-light verify checks every "
            "reference)"
        )
    return lines


def _plural(n: int, word: str) -> str:
    """``word`` for 1, ``word + s`` otherwise."""
    return word if n == 1 else word + "s"


def _sharing(shared: list[dict], across: str = "") -> str:
    """``N ranges are read by several tensors (M tensors, X stored once for Y of tensors)``."""
    tensors = sum(len(r["tensors"]) for r in shared)
    once = sum(r["length"] for r in shared)
    read = sum(r["length"] * len(r["tensors"]) for r in shared)
    ranges = "1 range is" if len(shared) == 1 else f"{len(shared)} ranges are each"
    return (
        f"{ranges} read by several tensors{across} ({tensors} tensors: "
        f"{human(once)} stored once for {human(read)} of tensors)"
    )


def cmd_verify(args: argparse.Namespace) -> int:
    """Run ``onnx-light verify``: one line per problem on stdout.

    With several models, each is checked; the ranges their tensors share
    (within and across them) are counted on the last line.

    Args:
        args: the parsed arguments (model: a list).

    Returns:
        0 when every reference is valid, else 1.
    """
    results, shared = verify_models(args.model)
    verdicts = [loader_verdicts(path) for path in args.model]
    failed = sum(1 for _, problems in results if problems)
    if args.json:
        models = [
            {
                "model": path,
                "external_tensors": count,
                "problems": problems,
                "loaders": [v.as_dict() for v in found],
                "fix": _loaders_fix(path, found),
            }
            for path, (count, problems), found in zip(args.model, results, verdicts, strict=True)
        ]
        print(json.dumps({"models": models, "shared": shared}, indent=2))
        return 1 if failed else 0
    for path, (count, problems), found in zip(args.model, results, verdicts, strict=True):
        for p in problems:
            print(_printable(p))
        model = _printable(path)
        if problems:
            print(
                f"{PROG}: error: {len(problems)} {_plural(len(problems), 'problem')} with "
                f"external references in {model}",
                file=sys.stderr,
            )
        elif all(v.accepts for v in found):
            print(
                f"OK {model}: {count} external tensors, every reference valid "
                "(onnx, onnxruntime and onnx-ir load it)"
            )
        else:
            print(f"OK {model}: {count} external tensors, every reference valid")
            for line in _loader_lines(path, found):
                print(_printable(line))
    if shared:
        across = " of these models" if len(args.model) > 1 else ""
        print(f"{_sharing(shared, across)}: valid, each range is stored once")
    return 1 if failed else 0


def _loaders_fix(path: str, verdicts: list) -> str | None:
    """The command that writes a copy every loader accepts, when one refuses."""
    if all(v.accepts for v in verdicts):
        return None
    return f"{PROG} align {path} DIR/{os.path.basename(path)}"


def _loader_lines(path: str, verdicts: list) -> list[str]:
    """What each loader will do with a valid model one of them refuses, and the fix."""
    lines = [
        f"  {v.rule}: accepts" if v.accepts else f"  {v.rule}: refuses: {'; '.join(v.reasons)}"
        for v in verdicts
    ]
    fix = _loaders_fix(path, verdicts)
    return [*lines, f"  {fix} writes a copy every loader accepts (plain files, one link each)"]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        # PROG, not self.prog ("onnx-light align"): every error line starts alike
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def _add_write_flags(p: argparse.ArgumentParser, models: str) -> None:
    """The flags of every command that writes models: --prune, --durable,
    --drop-behind, -q."""
    p.add_argument(
        "--prune",
        action="store_true",
        help=f"in place: delete the weights files the old {models} used and no .onnx of the "
        "folder references any more (listed either way)",
    )
    p.add_argument(
        "--durable",
        action="store_true",
        help="flush the new files and their folder to the disk before returning (fsync), "
        "even into a new folder; in place (replacing files) it is always done",
    )
    p.add_argument(
        "--drop-behind",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="drop the copied ranges from the page cache as the copy goes (written to disk "
        "first), so the rest of the cache stays; default: only when the copy exceeds the "
        "memory available (MemAvailable, or the memory cgroup's room)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")


def build_parser() -> argparse.ArgumentParser:
    """The ``onnx-light`` argument parser, with its four subcommands.

    Returns:
        An :class:`argparse.ArgumentParser`; each subcommand sets ``func``.
    """
    parser = _Parser(
        prog=PROG,
        description="Inspect, check, re-align and deduplicate ONNX models with external "
        "data, without loading their weights in memory.",
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
    p.add_argument(
        "dst", type=_output, metavar="DST.onnx", help="the new model (may be SRC: in place)"
    )
    p.add_argument(
        "--weights",
        type=_output,
        metavar="PATH",
        help="the new weights file, inside DST's folder: a path from the current folder "
        "(out/w.data) or from DST's folder (w.data) (default: in place, the name the weights "
        "already have, e.g. model.onnx_data; else DST.data, e.g. model.onnx.data)",
    )
    p.add_argument(
        "--alignment",
        type=_alignment,
        default=4096,
        metavar="BYTES",
        help="a power of two, or 0 for none (default: 4096)",
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
    p.add_argument(
        "--max-shard-size",
        type=_shard,
        default=None,
        metavar="BYTES",
        help="split the weights into files of at most BYTES each, e.g. 2G, named as onnx-ir "
        "names them (model-00001-of-00003.onnx.data); a larger tensor is alone in its file",
    )
    p.add_argument(
        "--shard-naming",
        choices=SHARD_NAMINGS,
        default=None,
        help="how shards are named: onnx-ir (default: model-00001-of-00003.onnx.data; in "
        "place, the naming the model's shards follow) or transformers.js (model.onnx_data, "
        "model.onnx_data_1, ...: the names its loader derives, at most 100 files; the "
        "weights default to DST_data)",
    )
    p.add_argument(
        "--inline-below",
        type=_size,
        default=None,
        metavar="BYTES",
        help="write external tensors smaller than BYTES inline in DST (onnxruntime refuses "
        "some small inputs, a shape or axes, stored as external data)",
    )
    p.add_argument(
        "--rewrite",
        action="store_true",
        help="in place, write the files again even when they already are as this align would "
        "write them (by default nothing is written then)",
    )
    _add_write_flags(p, "model")
    p.set_defaults(func=cmd_align)

    p = sub.add_parser(
        "dedup",
        help="write models that share one weights file, each distinct tensor stored once",
        description="Compare the tensors of every SRC by content (lengths, then samples, then "
        "bytes compared chunk by chunk) and write models that all reference one weights file "
        "in which each distinct byte string is stored once, at aligned offsets: an exporter's "
        "decoder and decoder-with-past, or tied weights in one model. Names, dtypes and shapes "
        "do not matter, equal bytes do. Weights never sit in RAM. Every output model and the "
        "weights are committed together: an error leaves every old file as it was. A 2-D tensor "
        "stored as the transpose of another is reported, not shared.",
    )
    p.add_argument("sources", nargs="+", metavar="SRC.onnx", help="the models to deduplicate")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--out",
        metavar="DIR",
        help="write each model to DIR/<its file name> (DIR must exist; see --names)",
    )
    p.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="with --out: the file name of each output model, one per SRC, in order "
        "(default: each source's file name; when two share one, as onnxruntime-genai's "
        "folders do, FOLDER_FILE: int4_model.onnx for int4/model.onnx)",
    )
    p.add_argument(
        "--with-files",
        action="store_true",
        help="with --out: copy the exporter's other files (config.json, generation_config.json, "
        "tokenizer files, genai_config.json: *.json, *.txt, *.model, *.tiktoken, *.jinja) "
        "beside the models, never a model or weights file",
    )
    where.add_argument(
        "--in-place",
        action="store_true",
        help="replace every SRC (all in one folder); the old weights files are listed, or "
        "deleted with --prune",
    )
    p.add_argument(
        "--weights",
        type=_output,
        metavar="NAME",
        help="the shared weights file, inside the destination folder: a path from the "
        "current folder or from that folder "
        "(default: in place, the name the weights already have when the models read one "
        "file, e.g. model.onnx_data; else weights.data, or with one model its name + .data, "
        "e.g. model.onnx.data)",
    )
    p.add_argument(
        "--alignment",
        type=_alignment,
        default=4096,
        metavar="BYTES",
        help="a power of two, or 0 for none (default: 4096)",
    )
    p.add_argument(
        "--size-threshold",
        type=_size,
        default=1024,
        metavar="BYTES",
        help="inline tensors of at least BYTES move to the weights file and are compared; "
        "smaller ones stay in their model (default: 1K)",
    )
    p.add_argument(
        "--max-shard-size",
        type=_shard,
        default=None,
        metavar="BYTES",
        help="split the weights into files of at most BYTES each, e.g. 2G, named as onnx-ir "
        "names them (weights-00001-of-00003.data); a larger tensor is alone in its file",
    )
    p.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="FILE.safetensors",
        help="a .safetensors file of the destination folder that already holds weights "
        "(repeatable; a path from the current folder, e.g. out/model.safetensors): a tensor "
        "whose bytes are a whole tensor of it points into it instead of being written; the "
        "file is only read",
    )
    p.add_argument(
        "--chunk-size",
        type=_chunk,
        default=4 * 1024 * 1024,
        metavar="BYTES",
        help="bytes per copy call, e.g. 4M (default: 4 MiB)",
    )
    _add_write_flags(p, "models")
    p.set_defaults(func=cmd_dedup)

    p = sub.add_parser(
        "info",
        help="list every tensor, where its bytes live and how they are aligned",
        description="A table of every tensor (name, dtype, shape, location, offset, length, "
        "the largest power of two dividing the offset), totals per file, whether "
        "the model is aligned to 4096 / 65536, and the ranges several tensors read "
        "(a deduplicated model). Weights are not read (but with --twins).",
    )
    p.add_argument(
        "model",
        nargs="+",
        metavar="MODEL.onnx",
        help="one model, or several: then the ranges their tensors share are listed too",
    )
    p.add_argument("--json", action="store_true", help="print a JSON document instead")
    p.add_argument(
        "--external",
        action="store_true",
        help="list only the external tensors (the summary and files still count every one)",
    )
    p.add_argument(
        "--min-size",
        type=_size,
        default=0,
        metavar="BYTES",
        help="list only the tensors of at least BYTES, e.g. 1K",
    )
    p.add_argument(
        "--twins",
        action="store_true",
        help="also look for 2-D tensors stored as the transpose of another (as dedup does): "
        "this reads their bytes, a few samples first, then tile by tile",
    )
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "verify",
        help="check that every external reference is valid",
        description="Check every external reference: the file exists and stays inside the "
        "model's folder, the range fits in it and matches dtype x dims. Exit 0 when all "
        "are valid, else 1 with one line per problem. Ranges read by several tensors are "
        "counted, not refused: sharing is valid. Says whether onnx, onnxruntime and onnx-ir "
        "will load each model (their rules for symbolic and hard links differ), and how to "
        "write a copy they all accept.",
    )
    p.add_argument(
        "model",
        nargs="+",
        metavar="MODEL.onnx",
        help="one model, or several (exit 1 when any has a problem)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON document instead: per model its problems, each loader's verdict "
        "and the fix",
    )
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
        return _fail(args, str(e))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        _json_error(args, "interrupted")
        return 130
    except Exception as e:  # never a traceback, whatever the input file holds
        return _fail(args, f"unexpected {type(e).__name__}: {e}", " (please report it)")


def _fail(args: argparse.Namespace, message: str, hint: str = "") -> int:
    """Report a failure: one line on stderr (and JSON on stdout for ``info --json``).

    Returns:
        The exit code, 1.
    """
    print(f"{PROG}: error: {_printable(message)}{hint}", file=sys.stderr)
    _json_error(args, message)
    return 1


def _json_error(args: argparse.Namespace, message: str) -> None:
    """For ``info --json`` and ``verify --json``, print ``{"error": ..., "model": ...}``
    on stdout.

    Scripts parsing stdout then always get one JSON document; each command
    prints its own document in one call, after which nothing can fail but the
    write.
    """
    if args.func in (cmd_info, cmd_verify) and args.json:
        with contextlib.suppress(OSError, ValueError):  # stdout closed or a broken pipe
            model = args.model[0] if len(args.model) == 1 else args.model
            print(json.dumps({"error": message, "model": model}, indent=2), flush=True)
