"""``--with-files``: the exporter's other files a writing command copies beside its
models (config.json, tokenizer files, genai_config.json), for every command whose
output may be another folder (align, convert, dedup): one flag, one list of files,
the same lines said."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

from ._args import with_progress
from ._text import printable

__all__ = [
    "IN_OWN_FOLDER",
    "add_with_files_flag",
    "exporter_files",
    "files_notes",
    "output_notes",
    "own_folder",
    "run_one_model",
]


GENAI_CONFIG = "genai_config.json"
IN_OWN_FOLDER = (
    "--with-files: nothing to copy, the output is in the source's folder, where its files "
    "already are"
)
EXPORTER_FILES = (".json", ".txt", ".model", ".tiktoken", ".jinja")  # configs, tokenizers


def exporter_files(sources: list[str]) -> list[str]:
    """The exporter's other files beside the sources (config.json, generation_config.json,
    tokenizer files, genai_config.json...): what a loader reads beside the models; never a
    model or a weights file. Every folder's, in the sources' order. Every entry of those
    names, whatever it is: one that is no regular file (a FIFO, a folder, a dangling link,
    a link to a device) is refused by the library, by name, before anything is written,
    never silently left out of the copy."""
    found = []
    for folder in dict.fromkeys(os.path.dirname(os.path.abspath(s)) for s in sources):
        for name in sorted(os.listdir(folder)):
            if name.endswith(EXPORTER_FILES):
                found.append(os.path.join(folder, name))
    return found


def own_folder(src: str, dst: str) -> bool:
    """True when ``dst`` is written in the folder ``src`` lies in (links resolved): the
    exporter's files are already beside it, nothing to copy."""
    try:
        return os.path.samefile(
            os.path.dirname(os.path.abspath(src)), os.path.dirname(os.path.abspath(dst))
        )
    except OSError:
        return False


def add_with_files_flag(p: argparse.ArgumentParser, where: str) -> None:
    """Declare ``--with-files`` on a writing command (``where``: when it applies)."""
    p.add_argument(
        "--with-files",
        action="store_true",
        help=f"{where}: copy the exporter's other files (config.json, generation_config.json, "
        "tokenizer files, genai_config.json: *.json, *.txt, *.model, *.tiktoken, *.jinja) "
        "beside the output, never a model or weights file, with the models (an error leaves "
        "none of them; a file of that name there is replaced). A file is copied only when, "
        "links resolved, it lies in its model's folder or in the folder of the model file's "
        "real path (a Hugging Face snapshot's blobs/), as the models' data files: any other "
        "link is refused by name and nothing is written. A genai_config.json names the "
        "output models when they are written under other names",
    )


def run_one_model(
    args: argparse.Namespace,
    verb: str,
    write: Callable[[object, Sequence[str]], object],
    summary: Callable[[argparse.Namespace, object, float], str],
) -> int:
    """Run a command of one SRC and one DST (align, convert, quantize): the exporter's
    files when ``--with-files`` asks for them, the progress bar, the summary, then what
    was copied.

    Args:
        args: the parsed arguments (src, dst, with_files, quiet and the write flags).
        verb: the command's name, shown beside the progress bar.
        write: calls the library with the options and the files to copy beside the
            new model; returns its result.
        summary: the command's summary of the result and the seconds it took.

    Returns:
        The exit code, 0.
    """
    extra = [] if own_folder(args.src, args.dst) else exporter_files([args.src])
    result, elapsed = with_progress(
        args,
        f"{verb} {os.path.basename(args.src)}",
        lambda options: write(options, extra if args.with_files else ()),
    )
    if not args.quiet:
        print(summary(args, result, elapsed))
        for line in output_notes(args, extra, result):
            print(line)
    return 0


def output_notes(args: argparse.Namespace, extra: list[str], result) -> list[str]:
    """:func:`files_notes` for a command of one SRC and one DST (align, convert); in the
    source's own folder, that ``--with-files`` had nothing to copy."""
    if own_folder(args.src, args.dst):
        return [IN_OWN_FOLDER] if args.with_files else []
    folder = os.path.dirname(os.path.abspath(args.dst))
    return files_notes(args.with_files, extra, result, folder, "it")


def files_notes(
    with_files: bool, extra: list[str], result, folder: str, noun: str = "them"
) -> list[str]:
    """What became of the exporter's files: copied (and which configs name the new
    models), left out (another of that name came first), or, without ``--with-files``,
    that the sources' folder holds some a loader needs.

    Args:
        with_files: ``--with-files`` was given.
        extra: the exporter's files of the sources' folders.
        result: the writer's result (``files_copied``, ``files_left``,
            ``files_rewritten``).
        folder: the destination folder.
        noun: what the files are copied beside ("them": the models).
    """
    lines = []
    copied = [os.path.basename(p) for p in result.files_copied]
    if copied:
        lines.append(f"copied beside {noun}: {', '.join(printable(n) for n in copied)}")
    elif extra and not with_files:
        names = list(dict.fromkeys(os.path.basename(p) for p in extra))
        shown = ", ".join(printable(n) for n in names[:3])
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        lines.append(
            f"the source folder also holds {shown}{more}, which loaders such as optimum's "
            "ORTModel and onnxruntime-genai read beside the models: --with-files copies them"
        )
    for target, names in result.files_rewritten.items():
        pairs = ", ".join(f"{printable(new)} (was {printable(old)})" for old, new in names.items())
        lines.append(f"{printable(os.path.basename(target))} names {pairs}")
    for target in result.files_rewritten:  # one config per source folder: an overlay
        if os.path.basename(target) != GENAI_CONFIG:
            lines.append(
                f"onnxruntime-genai: og.Model({printable(folder)!r}) loads what "
                f"{GENAI_CONFIG} names; for what {printable(os.path.basename(target))} names: "
                f"config = og.Config({printable(folder)!r}); "
                f"config.overlay(open({printable(os.path.join(folder, os.path.basename(target)))!r})"
                ".read()); og.Model(config)"
            )
    for path, first in result.files_left:
        target = os.path.join(folder, os.path.basename(path))
        lines.append(f"not copied: {path} ({target} holds the copy of {first})")
    return lines
