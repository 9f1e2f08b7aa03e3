"""``verify_model``: every external reference checked, and what each loader will do.

Each reference is resolved and checked as every writer checks it (the file
exists, stays inside the model's folder, is a regular file with one link,
the range fits in it and matches dtype x dims), in one pass that opens each
data file once. The references' locations read in that pass are judged by
the rules of onnx, onnxruntime and onnx-ir (``loaders.py``). What
``onnx-light verify`` prints is these objects, formatted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .._read.external import InlineSpans, Resolver, read_entries
from .._read.scan import scan_model
from .._read.sources import SourceFiles
from .._read.tensors import TensorSite, is_external, iter_tensors
from .info import text
from .loaders import LoaderVerdict, in_subgraph, loader_verdicts
from .ranges import RangeReaders, SharedRange

__all__ = ["VerifyReport", "VerifyResult", "verify_model", "verify_models"]


@dataclass(frozen=True)
class VerifyResult:
    """What :func:`verify_model` says of one model.

    Attributes:
        model: the ``.onnx`` file, as its path was given.
        external_tensors: the tensors whose bytes are in external data files
            (the ``.onnx``'s own inline bytes are not external).
        problems: one message per cause, each naming the tensor and the file
            (tensors failing for the same reason, e.g. a missing file, share
            one: ``3 tensors ('W0', 'W1', 'W2'): ...``); empty when every
            reference is valid.
        loaders: one :class:`LoaderVerdict` each for onnx, onnxruntime and
            onnx-ir, in that order: whether it will load the model's external
            data (their rules for links differ from onnx-light's and from
            each other's).

    .. versionadded:: 0.1
    """

    model: str
    external_tensors: int
    problems: tuple[str, ...]
    loaders: tuple[LoaderVerdict, ...]

    @property
    def valid(self) -> bool:
        """True when every external reference is valid (no problem)."""
        return not self.problems

    @property
    def loadable(self) -> bool:
        """True when onnx, onnxruntime and onnx-ir all accept the model's external data.

        A valid model they refuse (a Hugging Face cache snapshot: its files
        are links) loads once copied by :func:`align_external_data_streaming`
        into plain files.
        """
        return all(v.accepts for v in self.loaders)


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_models` says of several models, and the ranges they share.

    Attributes:
        models: one :class:`VerifyResult` per model, in the order given.
        shared_ranges: the ranges of one file (found by its identity, device
            and inode, whatever the location's spelling) read by several valid
            references of these models, within one model or across them.
            Sharing is valid, never a problem.

    .. versionadded:: 0.1
    """

    models: tuple[VerifyResult, ...]
    shared_ranges: tuple[SharedRange, ...]

    @property
    def valid(self) -> bool:
        """True when every reference of every model is valid."""
        return all(m.valid for m in self.models)


def verify_model(path: str | os.PathLike) -> VerifyResult:
    """Check every external reference of a model, and say which loaders will load it.

    What ``onnx-light verify`` prints for one model. Nothing is loaded: the
    model is parsed without its weights and each data file is opened once.

    Args:
        path: the ``.onnx`` file.

    Returns:
        A :class:`VerifyResult`: the number of external tensors, the problems
        (empty when every reference is valid) and each loader's verdict.

    Raises:
        FileNotFoundError: the model file does not exist.
        ValueError: it is not an ONNX model. A reference that is not valid
            raises nothing: it is one of the problems.

    .. versionadded:: 0.1
    """
    return _verify(path, RangeReaders())


def verify_models(paths: Sequence[str | os.PathLike]) -> VerifyReport:
    """:func:`verify_model` for each model, and the ranges their tensors share.

    What ``onnx-light verify`` prints for several models (``--json``: every
    field).

    Args:
        paths: the ``.onnx`` files.

    Returns:
        A :class:`VerifyReport`; its ``valid`` is False when any model has a
        problem.

    Raises:
        FileNotFoundError: a model file does not exist.
        ValueError: a model is not an ONNX model.

    .. versionadded:: 0.1
    """
    readers = RangeReaders()
    models = tuple(_verify(path, readers) for path in paths)
    return VerifyReport(models, readers.shared())


def _verify(path: str | os.PathLike, readers: RangeReaders) -> VerifyResult:
    """Check one model; record each valid nonempty external range in ``readers``."""
    shown = os.fspath(path)
    full = os.path.abspath(shown)
    count, problems = 0, []  # (tensor label, message)
    pairs: dict[tuple[str, bool], None] = {}  # (location, in a subgraph): the loaders judge
    with SourceFiles() as files:
        model, inline = scan_model(full, files)
        resolver = Resolver(os.path.dirname(full), files, inline, inline.source)
        for site in iter_tensors(model):
            if not is_external(site.tensor):
                continue
            try:
                ref = resolver.resolve(site)
            except (OSError, ValueError) as e:
                problems.append((site.label, str(e)))
                count += 1
                _judged(site, inline, pairs)
                continue
            if ref.source is inline.source:  # inline bytes are not external
                continue
            count += 1
            pairs[ref.location, in_subgraph(site.path)] = None
            if ref.length > 0:
                where = (ref.location, ref.offset, ref.length)
                readers.add(ref.span, where, (shown, text(site.tensor.name) or site.label))
    verdicts = loader_verdicts(shown, list(pairs))
    return VerifyResult(shown, count, _grouped(problems), verdicts)


def _judged(site: TensorSite, inline: InlineSpans, pairs: dict) -> None:
    """Record the location of a reference that failed its check, when it has a
    readable one: the loaders' verdicts judge it too."""
    try:
        entries = read_entries(site)
    except ValueError:
        return  # the entry itself is the problem, reported
    if not inline.holds(entries):
        pairs[entries["location"], in_subgraph(site.path)] = None


def _grouped(problems: list[tuple[str, str]]) -> tuple[str, ...]:
    """One line per cause: tensors failing for the same reason share a line."""
    causes: dict[str, list[str]] = {}
    for label, message in problems:
        causes.setdefault(message.replace(f"tensor {label}", "tensor {}", 1), []).append(label)
    lines = []
    for cause, labels in causes.items():
        if len(labels) == 1:
            lines.append(cause.replace("tensor {}", f"tensor {labels[0]}", 1))
            continue
        shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        lines.append(cause.replace("tensor {}", f"{len(labels)} tensors ({shown})", 1))
    return tuple(lines)
