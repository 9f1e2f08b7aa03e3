"""load and save: ONNX models with external data, aligned and in parallel."""

from __future__ import annotations

import os

import onnx

from ._commit.atomic import folder_lock
from ._commit.targets import destination_path
from ._errors import shown
from ._options import SerializeOptions, WriteOptions, check_num_threads, check_options
from ._pipeline import Pipeline, WriteResult
from ._read.external import TensorRef, set_inline
from ._read.scan import external_refs, own_location, parse_model, scan_model
from ._read.sources import SourceFiles, kernel_path
from ._system.files import read_refs, read_whole

__all__ = ["load", "save", "serialize_to_file"]


def read_external_data(
    model: onnx.ModelProto, refs: list[TensorRef], files: SourceFiles, num_threads: int | None
) -> None:
    """Read every checked reference into its tensor's ``raw_data``, in place.

    There is never more than one reader per data file: on one file, more
    readers only add page faults (each thread's buffers come from its own
    allocator pool, handed back to the kernel after every tensor) while
    protobuf, holding the GIL, copies the bytes in one at a time
    (``make bench``: 1.1x the time of one reader at 1 GiB).
    """
    count = len({ref.source for ref in refs})
    threads = min(check_num_threads(num_threads), max(count, 1))
    for ref, data in read_refs(refs, files, threads):
        set_inline(ref.site.tensor, data)


def load(
    path: str | os.PathLike,
    *,
    load_external_data: bool = True,
    skip_raw_data: bool = False,
    num_threads: int | None = None,
) -> onnx.ModelProto:
    """Load an ONNX model, its external data read in parallel.

    The model file and every data file are opened and checked before any
    weight is read, while holding a shared lock on the model's folder (so an
    onnx-light commit to that folder never pairs this ``.onnx`` with other
    weights); the weights are then read from those descriptors.

    Args:
        path: the ``.onnx`` file.
        load_external_data: read every external tensor into ``raw_data``
            (the tensors :func:`onnx.load` returns); False keeps the references.
        skip_raw_data: never read the inline weights of the ``.onnx`` file:
            every inline raw_data of 1 KiB or more becomes an external
            reference into the ``.onnx`` file itself (location = its name,
            offset and length of the bytes). Requires ``load_external_data=False``.
        num_threads: parallel readers, at most as many as the data files.
            None (default): one. More readers were not faster beyond the
            noise, warm or cold (the measurements: :doc:`/benchmarks`); try 4
            for a cold model of many files, and measure.

    Returns:
        An :class:`onnx.ModelProto`.

    Raises:
        FileNotFoundError: the model or one of its data files is missing.
        ValueError: the file is not an ONNX model, both ``skip_raw_data``
            and ``load_external_data`` are set, ``skip_raw_data`` is set
            and the file's name is not valid UTF-8 (it could not be recorded
            as a location), or ``num_threads`` is under 1.
        ExternalDataError: a reference is malformed, unsafe or out of range.
        TypeError: ``num_threads`` is neither None nor an int.

    Examples:
        Load a model with its weights, as :func:`onnx.load` does, or only
        its graph and the references to the weights (nothing else read)::

            import onnx_light.onnx as onnxl

            model = onnxl.load("model.onnx")  # every tensor's raw_data filled
            meta = onnxl.load("model.onnx", load_external_data=False)
            for init in meta.graph.initializer:
                print(init.name, {e.key: e.value for e in init.external_data})
    """
    path = kernel_path(path)
    check_num_threads(num_threads)
    if skip_raw_data and load_external_data:
        raise ValueError("skip_raw_data=True needs load_external_data=False")
    folder = os.path.dirname(path)
    with SourceFiles() as files:
        if skip_raw_data:
            if own_location(path) != os.path.basename(path):
                raise ValueError(
                    f"cannot load {shown(path)} with skip_raw_data: its name is not valid "
                    "UTF-8, so the references into it cannot record it; rename the file"
                )
            return scan_model(path, files)[0]
        with folder_lock(folder, shared=True):
            source = files.model(path)
            with files.lease(source) as fd:
                data = read_whole(fd, source.size, repr(path))
            model = parse_model(data, path)
            del data
            refs = external_refs(model, folder, files, None, source) if load_external_data else []
        read_external_data(model, refs, files, num_threads)
    return model


def save(
    model: onnx.ModelProto,
    path: str | os.PathLike,
    location: str | os.PathLike | None = None,
    *,
    options: SerializeOptions | WriteOptions | None = None,
) -> WriteResult:
    """Save a model, its big tensors in an aligned external weights file.

    Without ``location`` the model is saved as one file. With it, every tensor
    whose raw_data holds at least ``options.size_threshold`` bytes goes to the
    weights file ``location`` at an offset aligned to ``options.alignment``,
    in the walker's order. The caller's model is not modified; both files are
    written atomically.

    Args:
        model: the model to save.
        path: the destination ``.onnx`` file.
        location: the weights file, inside ``path``'s folder: a path from
            the current folder into that folder
            (``os.path.join(out_dir, "m.onnx.data")``), or, as in onnx, a
            path from that folder (a name is placed next to ``path``).
            Recorded relative to the folder; a path both readings could
            mean is refused.
        options: a :class:`SerializeOptions` (None: its defaults, onnx.save's:
            **dense**, ``alignment`` 0), or any
            :class:`~onnx_light.onnx.WriteOptions` (aligned to 4096 by
            default; tensors already external keep their references, as
            with ``use_external_data_location``).

    Returns:
        A :class:`~onnx_light.onnx.WriteResult`: an int, the bytes of the
        weights files written (0 without ``location``).

    Raises:
        ValueError: the model exceeds 2 GiB without ``location``, or
            ``location`` lies outside the model's folder.
        FileNotFoundError: the destination folder or a referenced file is missing.
        ExternalDataError: an existing reference is unsafe or does not
            resolve from the destination folder.
        TypeError: ``model`` is not a ModelProto, or ``options`` not a
            :class:`SerializeOptions`.

    Examples:
        Save a model with its tensors of 1 KiB or more in
        ``model.onnx.data``, each at an offset multiple of 4096, or as a
        single file::

            import numpy as np

            import onnx_light.onnx as onnxl
            from onnx_light.onnx import helper, numpy_helper

            weights = [  # 4 weights of 256 x 256
                numpy_helper.from_array(np.ones((256, 256), np.float32), f"W{i}")
                for i in range(4)
            ]
            model = helper.make_model(helper.make_graph([], "g", [], [], weights))
            opts = onnxl.SerializeOptions(alignment=4096)
            onnxl.save(model, "model.onnx", location="model.onnx.data", options=opts)
            onnxl.save(model, "single.onnx")
    """
    options = check_options(options, SerializeOptions)
    path = destination_path(path)
    with Pipeline(options, [path], location, single_file=location is None) as run:
        keep = getattr(options, "use_external_data_location", True)
        run.add_model(model, path, keep=keep, base=getattr(options, "base_dir", None))
        run.lay_out()
        run.check_targets()
        run.write()
    return run.result()


def serialize_to_file(
    self: onnx.ModelProto,
    path: str | os.PathLike,
    options: SerializeOptions | None = None,
    weights_path: str | os.PathLike | None = None,
) -> None:
    """``ModelProto.SerializeToFile``: save this model, as :func:`save` does.

    ``model.SerializeToFile(path, options, weights_path)`` means
    ``save(model, path, location=weights_path, options=options)``:
    without ``weights_path`` a single file; with it, the tensors of at
    least ``options.size_threshold`` bytes in that weights file (a path
    read by the rule of :func:`save`'s ``location``), at offsets aligned to
    ``options.alignment``. ``options.use_external_data_location`` is
    honoured as in :func:`save`.

    onnx has no such method: importing :mod:`onnx_light.onnx` adds this
    one to :class:`onnx.ModelProto` (and nothing else), so code written for
    the onnx-light API runs unmodified.

    Args:
        self: the model to save.
        path: the destination ``.onnx`` file.
        options: a :class:`SerializeOptions` (defaults when None).
        weights_path: the weights file, or None for a single file.

    Raises:
        ValueError, FileNotFoundError, ExternalDataError, TypeError: as
        :func:`save`.

    Examples:
        The in-memory save of a loaded model, aligned to 4096::

            import numpy as np

            import onnx_light.onnx as onnxl
            from onnx_light.onnx import helper, numpy_helper

            weight = numpy_helper.from_array(np.ones((256, 256), np.float32), "W")
            model = helper.make_model(helper.make_graph([], "g", [], [], [weight]))
            opts = onnxl.SerializeOptions()
            opts.alignment = 4096
            model.SerializeToFile("inmem.onnx", opts, "inmem.data")
    """
    save(self, path, location=weights_path, options=options)
