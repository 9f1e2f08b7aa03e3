"""Will onnx, onnxruntime and onnx-ir load this model? Their link rules, from their code.

Each loader checks the files a model's external references name before it
reads them, and the three differ (measured on onnx 1.23, onnxruntime 1.25
and 1.32, and onnx-ir 1.1; the rules below are read from their code):

- **onnx >= 1.21** (``resolve_external_data_location`` in ``onnx/checker.cc``,
  called by :func:`onnx.load` and :func:`onnx.checker.check_model`): the
  location must be relative, hold no ``..``, and name, from the folder of
  the path given to ``onnx.load``, a regular file that is not a symbolic
  link, whose resolved path stays in that folder, and that has a single
  hard link. A Hugging Face cache snapshot (every file a link into
  ``blobs/``) is refused.
- **onnxruntime >= 1.25** (``ValidateExternalDataPath`` in
  ``core/framework/tensorprotoutils.cc``): the location must be relative
  and name, from the model's folder, an existing file whose resolved path
  lies in the model's folder or in the folder of the model's resolved path;
  links are followed, hard links accepted. Tensors inside a subgraph (an
  ``If``, ``Loop`` or ``Scan`` body) go through onnx's checker instead,
  with onnx's rules. Older versions check less (measured on 1.23.2, 1.24.1
  and 1.24.4): 1.24 applies the main graph's rule to a subgraph's tensors
  too (links and hard links accepted there), and 1.24.0 and 1.24.1 accept
  only the model's folder, not the folder of its resolved path (a Hugging
  Face snapshot is refused); 1.23 only checks that the file exists, and
  that a subgraph's location is relative and holds no ``..``. A model the
  rule accepts loads in 1.23 and from 1.24.2 on; one it refuses may load
  in an older onnxruntime, and fails from 1.25 on.
- **onnx-ir >= 1.1** (``ExternalTensor._check_path_containment`` in
  ``onnx_ir/_core.py``): the path, and the path with its links resolved,
  must stay in the model's folder; a file with several hard links is refused.

:func:`loader_verdicts` applies these rules to the references ``verify``
read (``verify.py``), without importing any of the three, and
``tests/test_loaders.py`` checks each verdict against what the installed
loader does on the same files.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from .._read.sources import is_inside, kernel_path

__all__ = ["LoaderVerdict", "in_subgraph", "loader_verdicts"]


LOADERS = ("onnx", "onnxruntime", "onnx-ir")
RULES = {"onnx": "onnx >= 1.21", "onnxruntime": "onnxruntime >= 1.25", "onnx-ir": "onnx-ir >= 1.1"}


@dataclass(frozen=True)
class LoaderVerdict:
    """Whether one loader will load a model's external data, and why not.

    One of the ``loaders`` of a :class:`VerifyResult`: the rule of that
    loader (read from its code, checked against the installed versions by
    the tests) applied to every file the model's external references name,
    without importing the loader.

    Attributes:
        loader: ``"onnx"``, ``"onnxruntime"`` or ``"onnx-ir"``.
        rule: the versions the rule holds for, e.g. ``"onnx >= 1.21"``.
        reasons: why it refuses, one line per cause, e.g. ``"m.onnx.data is a
            symbolic link"``; empty when it accepts.

    .. versionadded:: 0.1
    """

    loader: str
    rule: str
    reasons: tuple[str, ...] = ()

    @property
    def accepts(self) -> bool:
        """True when the loader accepts every reference of the model."""
        return not self.reasons


def in_subgraph(path: tuple) -> bool:
    """True for a tensor inside a graph attribute (an If, Loop or Scan body)."""
    return any(step[0] in ("g", "graphs") for step in path)


def _nlink(path: str) -> int:
    try:
        return os.stat(path).st_nlink
    except OSError:
        return 1


def onnx_refusal(folder: str, location: str) -> str | None:
    """Why onnx (>= 1.21) refuses ``location`` for a model in ``folder``, or None."""
    if os.path.isabs(location):
        return f"location {location!r} is absolute"
    if ".." in os.path.normpath(location):
        return f"location {location!r} holds '..'"
    path = os.path.join(folder, location)
    if os.path.islink(path):
        return f"{location} is a symbolic link"
    parts = os.path.normpath(location).split(os.sep)
    for i in range(1, len(parts)):  # openat2 with RESOLVE_NO_SYMLINKS: no link on the way
        if os.path.islink(os.path.join(folder, *parts[:i])):
            return f"{location} goes through a symbolic link ({'/'.join(parts[:i])})"
    if not is_inside(os.path.realpath(path), os.path.realpath(folder)):
        return f"{location} resolves outside the model's folder"
    try:
        st = os.stat(path)
    except OSError:
        return f"{location} does not exist"
    if not stat.S_ISREG(st.st_mode):
        return f"{location} is not a regular file"
    if st.st_nlink > 1:
        return f"{location} has {st.st_nlink} hard links"
    return None


def onnxruntime_refusal(model_path: str, location: str, in_subgraph: bool) -> str | None:
    """Why onnxruntime (>= 1.25) refuses ``location`` for ``model_path``, or None."""
    folder = os.path.dirname(model_path)
    if in_subgraph:  # onnx's checker reads the tensors of subgraphs
        reason = onnx_refusal(folder, location)
        return None if reason is None else f"{reason} (a tensor of a subgraph: onnx's rule)"
    if os.path.isabs(location):
        return f"location {location!r} is absolute"
    path = os.path.join(folder, location)
    if not os.path.isfile(path):
        return f"{location} does not exist"
    real = os.path.realpath(path)
    physical = os.path.dirname(os.path.realpath(model_path))
    if not (is_inside(real, os.path.realpath(folder)) or is_inside(real, physical)):
        return f"{location} resolves to {real}, outside the model's folder"
    return None


def onnx_ir_refusal(folder: str, location: str) -> str | None:
    """Why onnx-ir (>= 1.1) refuses ``location`` for a model in ``folder``, or None."""
    path = os.path.normpath(os.path.join(os.path.abspath(folder), location))
    if not is_inside(path, os.path.normpath(os.path.abspath(folder))):
        return f"location {location!r} leaves the model's folder"
    real = os.path.realpath(path)
    if not is_inside(real, os.path.realpath(folder)):
        return f"{location} resolves to {real}, outside the model's folder"
    if not os.path.exists(path):
        return f"{location} does not exist"
    links = _nlink(real)
    if links > 1:
        return f"{location} has {links} hard links"
    return None


def loader_verdicts(
    model_path: str | os.PathLike, found: list[tuple[str, bool]]
) -> tuple[LoaderVerdict, ...]:
    """What onnx, onnxruntime and onnx-ir will do with a model's external data.

    Args:
        model_path: the ``.onnx`` file, as the loader would be given it (its
            folder, not its resolved folder, is where references are read).
        found: its references' ``(location, in a subgraph)`` pairs, each once,
            as ``verify``'s pass read them (references it refuses included,
            when their location could be read).

    Returns:
        One :class:`LoaderVerdict` per loader, in :data:`LOADERS` order.
    """
    path = kernel_path(model_path)
    folder = os.path.dirname(path)
    reasons: dict[str, list[str]] = {name: [] for name in LOADERS}
    for location, in_subgraph in found:
        try:
            refusals = {
                "onnx": onnx_refusal(folder, location),
                "onnxruntime": onnxruntime_refusal(path, location, in_subgraph),
                "onnx-ir": onnx_ir_refusal(folder, location),
            }
        except ValueError:  # a NUL byte: no system call takes the path
            refusals = dict.fromkeys(LOADERS, f"location {location!r} is not a valid path")
        for name, reason in refusals.items():
            if reason is not None and reason not in reasons[name]:
                reasons[name].append(reason)
    return tuple(LoaderVerdict(name, RULES[name], tuple(reasons[name])) for name in LOADERS)
