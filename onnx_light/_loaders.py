"""Will onnx, onnxruntime and onnx-ir load this model? Their link rules, from their code.

Each loader checks the files a model's external references name before it
reads them, and the three differ (measured on onnx 1.23, onnxruntime 1.32
and onnx-ir 1.1; the rules below are read from their code):

- **onnx >= 1.21** (``resolve_external_data_location`` in ``onnx/checker.cc``,
  called by :func:`onnx.load` and :func:`onnx.checker.check_model`): the
  location must be relative, hold no ``..``, and name, from the folder of
  the path given to ``onnx.load``, a regular file that is not a symbolic
  link, whose resolved path stays in that folder, and that has a single
  hard link. A Hugging Face cache snapshot (every file a link into
  ``blobs/``) is refused.
- **onnxruntime >= 1.24** (``ValidateExternalDataPath`` in
  ``core/framework/tensorprotoutils.cc``; PR 27374 accepted the physical
  folder in 1.24.2): the location must be relative and name, from the
  model's folder, an existing file whose resolved path lies in the model's
  folder or in the folder of the model's resolved path; links are followed,
  hard links accepted. Tensors inside a subgraph (an ``If``, ``Loop`` or
  ``Scan`` body) go through onnx's checker instead, with onnx's rules.
- **onnx-ir >= 1.1** (``ExternalTensor._check_path_containment`` in
  ``onnx_ir/_core.py``): the path, and the path with its links resolved,
  must stay in the model's folder; a file with several hard links is refused.

:func:`loader_verdicts` applies these rules to a model without importing
any of the three, and ``tests/test_loaders.py`` checks each verdict against
what the installed loader does on the same files.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from .onnx._read.external import read_entries
from .onnx._read.scan import scan_model
from .onnx._read.sources import SourceFiles, is_inside, kernel_path
from .onnx._read.tensors import is_external, iter_tensors

__all__ = ["in_subgraph", "loader_verdicts", "references"]


LOADERS = ("onnx", "onnxruntime", "onnx-ir")
RULES = {"onnx": "onnx >= 1.21", "onnxruntime": "onnxruntime >= 1.24", "onnx-ir": "onnx-ir >= 1.1"}


@dataclass
class Verdict:
    """Whether one loader accepts a model, and why not.

    Attributes:
        loader: ``"onnx"``, ``"onnxruntime"`` or ``"onnx-ir"``.
        rule: the versions the rule holds for (``"onnx >= 1.21"``).
        reasons: why it refuses, one per cause (empty: it accepts).
    """

    loader: str
    rule: str
    reasons: list[str] = field(default_factory=list)

    @property
    def accepts(self) -> bool:
        """True when the loader accepts every reference of the model."""
        return not self.reasons

    def as_dict(self) -> dict:
        """The verdict as JSON: ``{"loader", "rule", "accepts", "reasons"}``."""
        return {
            "loader": self.loader,
            "rule": self.rule,
            "accepts": self.accepts,
            "reasons": list(self.reasons),
        }


def in_subgraph(path: tuple) -> bool:
    """True for a tensor inside a graph attribute (an If, Loop or Scan body)."""
    return any(step[0] in ("g", "graphs") for step in path)


def references(model_path: str) -> list[tuple[str, bool]]:
    """``(location, in a subgraph)`` of every external reference, each pair once.

    References into the ``.onnx`` file's own inline bytes (made by the scan)
    are left out: they are not external data.

    Raises:
        FileNotFoundError, ValueError: the model itself cannot be read.
    """
    with SourceFiles() as files:
        model, spans = scan_model(model_path, files)
    found: dict[tuple[str, bool], None] = {}
    for site in iter_tensors(model):
        if not is_external(site.tensor):
            continue
        try:
            entries = read_entries(site)
        except ValueError:
            continue  # verify reports the entry itself
        if not spans.holds(entries):
            found.setdefault((entries["location"], in_subgraph(site.path)), None)
    return list(found)


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
    """Why onnxruntime (>= 1.24) refuses ``location`` for ``model_path``, or None."""
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
    model_path: str | os.PathLike, found: list[tuple[str, bool]] | None = None
) -> list[Verdict]:
    """What onnx, onnxruntime and onnx-ir will do with a model's external data.

    Args:
        model_path: the ``.onnx`` file, as the loader would be given it (its
            folder, not its resolved folder, is where references are read).
        found: its references' ``(location, in a subgraph)`` pairs (as
            :func:`references` gives them), when the caller has read them
            already (``verify``'s own pass); None: read here.

    Returns:
        One :class:`Verdict` per loader, in :data:`LOADERS` order.

    Raises:
        FileNotFoundError, ValueError: the model itself cannot be read.
    """
    path = kernel_path(model_path)
    folder = os.path.dirname(path)
    verdicts = {name: Verdict(name, RULES[name]) for name in LOADERS}
    for location, in_subgraph in references(path) if found is None else found:
        try:
            refusals = {
                "onnx": onnx_refusal(folder, location),
                "onnxruntime": onnxruntime_refusal(path, location, in_subgraph),
                "onnx-ir": onnx_ir_refusal(folder, location),
            }
        except ValueError:  # a NUL byte: no system call takes the path
            refusals = dict.fromkeys(LOADERS, f"location {location!r} is not a valid path")
        for name, reason in refusals.items():
            if reason is not None and reason not in verdicts[name].reasons:
                verdicts[name].reasons.append(reason)
    return [verdicts[name] for name in LOADERS]
