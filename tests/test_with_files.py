"""``with_files`` / ``--with-files`` on align and convert: an exporter's folder written
elsewhere loads (optimum needs config.json beside the model), under dedup's rules."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from helpers import folder_digest, make_runnable_model, read_back, run_ort, save_two_file
from helpers import run_cli as _cli

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import atomic as _atomic

# what optimum writes beside an exported model (ORTModel.from_pretrained reads them)
OPTIMUM = {
    "config.json": '{"model_type": "gpt2", "n_layer": 2}',
    "generation_config.json": '{"bos_token_id": 0, "eos_token_id": 0}',
    "tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}',
    "tokenizer_config.json": '{"model_max_length": 1024}',
    "special_tokens_map.json": '{"eos_token": "<|endoftext|>"}',
}


def _align(src, dst, with_files):
    return onnxl.align_external_data_streaming(src, dst, with_files=with_files)


def _convert(src, dst, with_files):
    return onnxl.convert_float_to_float16(src, dst, with_files=with_files)


WRITERS = {"align": _align, "convert": _convert}


def _export(folder) -> str:
    """An optimum-like export: model.onnx + model.onnx_data and its config files."""
    folder.mkdir(parents=True)
    save_two_file(make_runnable_model(), folder / "model.onnx", "model.onnx_data")
    for name, text in OPTIMUM.items():
        (folder / name).write_text(text)
    return str(folder / "model.onnx")


def _files(folder) -> list[str]:
    return [str(folder / name) for name in OPTIMUM]


@pytest.mark.parametrize("verb", WRITERS)
def test_with_files_brings_the_exporter_files(tmp_path, verb):
    """Aligned or converted into another folder, the model has optimum's files beside
    it (same bytes, plain files), in the result; the source folder is unchanged."""
    src = _export(tmp_path / "export")
    before = folder_digest(tmp_path / "export")
    out = tmp_path / "out"
    out.mkdir()
    result = WRITERS[verb](src, out / "model.onnx", _files(tmp_path / "export"))
    assert result.files_copied == [str(out / name) for name in OPTIMUM]
    assert result.files_left == [] and result.files_rewritten == {}
    for name, text in OPTIMUM.items():
        assert not os.path.islink(out / name) and (out / name).read_text() == text
    assert sorted(os.listdir(out)) == sorted([*OPTIMUM, "model.onnx", "model.onnx.data"])
    assert folder_digest(tmp_path / "export") == before
    if verb == "align":
        assert read_back(out / "model.onnx") == read_back(src)
        assert run_ort(out / "model.onnx")[0].tobytes() == run_ort(src)[0].tobytes()


@pytest.mark.parametrize("verb", WRITERS)
def test_with_files_refused_before_anything_is_written(tmp_path, verb):
    """A folder, the source model, its weights file, a file of another folder, a link
    out of the folder, a FIFO, a dangling link: each refused by name, nothing written."""
    src = _export(tmp_path / "export")
    folder = tmp_path / "export"
    (tmp_path / "elsewhere.json").write_text("{}")
    (folder / "sub").mkdir()
    os.symlink(tmp_path / "elsewhere.json", folder / "linked.json")
    os.symlink("missing.json", folder / "dangling.json")
    os.mkfifo(folder / "fifo.json")
    out = tmp_path / "out"
    out.mkdir()
    cases = [
        (folder / "sub", ValueError, "is a folder, not a file"),
        (src, ValueError, "is the source model"),
        (folder / "model.onnx_data", ValueError, "is a weights file of model"),
        (tmp_path / "elsewhere.json", ValueError, "not in the folder of a source model"),
        (folder / "linked.json", onnxl.ExternalDataError, "outside the model folder"),
        (folder / "dangling.json", FileNotFoundError, "is a link to 'missing.json'"),
        (folder / "fifo.json", onnxl.ExternalDataError, "is not a regular file"),
        (folder / "nope.json", FileNotFoundError, "nope.json"),
    ]
    for path, error, message in cases:
        with pytest.raises(error, match=message) as caught:
            WRITERS[verb](src, out / "model.onnx", [folder / "config.json", path])
        assert os.path.basename(path) in str(caught.value)
        assert os.listdir(out) == [], path
    with pytest.raises(TypeError, match="a list of paths"):
        WRITERS[verb](src, out / "model.onnx", str(folder / "config.json"))
    (folder / "model.onnx.data").write_text("not read by model.onnx")
    with pytest.raises(ValueError, match="which this call writes otherwise"):
        WRITERS[verb](src, out / "model.onnx", [folder / "model.onnx.data"])
    assert os.listdir(out) == []


def test_with_files_committed_with_the_model(tmp_path, monkeypatch):
    """A failed rename at the commit puts every old file back, the copies' too (a stale
    config.json stays the stale one); the next call replaces it."""
    src = _export(tmp_path / "export")
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("an older, truncated cop")
    before = folder_digest(out)
    real_replace = os.replace
    dst = out / "model.onnx"

    def refuse_onnx(a, b, *args, **kwargs):
        if str(b) == str(dst):
            raise OSError(errno.EPERM, "Operation not permitted (immutable)", str(b))
        return real_replace(a, b, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", refuse_onnx)
        m.setattr(_atomic, "_exchange", lambda a, b: False)
        with pytest.raises(OSError, match="immutable"):
            onnxl.convert_float_to_float16(src, dst, with_files=_files(tmp_path / "export"))
    assert folder_digest(out) == before
    onnxl.convert_float_to_float16(src, dst, with_files=_files(tmp_path / "export"))
    assert (out / "config.json").read_text() == OPTIMUM["config.json"]


def test_with_files_names_the_renamed_model_in_genai_config(tmp_path):
    """genai_config.json names model.onnx: aligned as int4.onnx, the copy names
    int4.onnx, everything else as it was (keys in order, values)."""
    src = _export(tmp_path / "export")
    config = {
        "model": {
            "decoder": {"filename": "model.onnx", "head_size": 64, "inputs": {"x": "X"}},
            "eos_token_id": [2, 32000],
            "type": "llama",
        },
        "search": {"max_length": 4096, "top_p": 0.9, "temperature": 1e-05},
    }
    text = json.dumps(config, indent=4)
    (tmp_path / "export" / "genai_config.json").write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    files = [tmp_path / "export" / "genai_config.json", tmp_path / "export" / "config.json"]
    result = onnxl.align_external_data_streaming(src, out / "int4.onnx", with_files=files)
    assert result.files_rewritten == {str(out / "genai_config.json"): {"model.onnx": "int4.onnx"}}
    assert (tmp_path / "export" / "genai_config.json").read_text() == text  # source kept
    written = (out / "genai_config.json").read_text()
    config["model"]["decoder"]["filename"] = "int4.onnx"
    assert written == json.dumps(config, indent=4)
    assert json.loads(written) == config


def test_cli_align_with_files(tmp_path, capsys):
    """What a newcomer sees: without --with-files, that the folder holds files a loader
    needs; with it, the files copied; in place, that there is nothing to copy."""
    src = _export(tmp_path / "export")
    (tmp_path / "out").mkdir()
    code, out, err = _cli(capsys, "align", src, tmp_path / "out" / "model.onnx")
    assert code == 0, err
    assert (
        "also holds config.json, generation_config.json, special_tokens_map.json and 2 more" in out
    )
    assert "--with-files copies them" in out
    assert "config.json" not in os.listdir(tmp_path / "out")
    code, out, err = _cli(capsys, "align", src, tmp_path / "out" / "model.onnx", "--with-files")
    assert code == 0, err
    assert f"copied beside it: {', '.join(sorted(OPTIMUM))}" in out
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        [*OPTIMUM, "model.onnx", "model.onnx.data"]
    )
    before = folder_digest(tmp_path / "export")
    code, out, err = _cli(capsys, "align", src, src, "--with-files", "--rewrite")
    assert code == 0, err
    assert "--with-files: nothing to copy, the output is in the source's folder" in out
    assert set(os.listdir(tmp_path / "export")) == set(before)


def test_cli_convert_with_files(tmp_path, capsys):
    src = _export(tmp_path / "export")
    (tmp_path / "out").mkdir()
    dst = tmp_path / "out" / "model_fp16.onnx"
    code, out, err = _cli(capsys, "convert", src, dst, "--to", "float16", "--with-files")
    assert code == 0, err
    assert f"copied beside it: {', '.join(sorted(OPTIMUM))}" in out
    for name, text in OPTIMUM.items():
        assert (tmp_path / "out" / name).read_text() == text
    code, out, err = _cli(
        capsys, "convert", src, tmp_path / "export" / "fp16.onnx", "--to", "float16", "--with-files"
    )
    assert code == 0, err
    assert "--with-files: nothing to copy" in out


@pytest.mark.parametrize("verb", ["align", "convert"])
def test_cli_with_files_refuses_a_link_out_of_the_folder(tmp_path, capsys, verb):
    src = _export(tmp_path / "export")
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret")
    os.remove(tmp_path / "export" / "tokenizer.json")
    os.symlink(secret, tmp_path / "export" / "tokenizer.json")
    (tmp_path / "out").mkdir()
    extra = ["--to", "float16"] if verb == "convert" else []
    argv = [verb, src, tmp_path / "out" / "model.onnx", *extra, "--with-files"]
    code, out, err = _cli(capsys, *argv)
    assert code == 1 and out == "" and "Traceback" not in err
    assert "tokenizer.json" in err and str(secret) in err and "outside the model folder" in err
    assert os.listdir(tmp_path / "out") == []


_FSIZE_CLI = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit returns EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, 1024 * 1024))
from onnx_light.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("verb", ["align", "convert"])
def test_cli_with_files_full_disk_leaves_nothing(tmp_path, verb):
    """The model fits, a 2 MiB tokenizer.json does not: nothing under a final name."""
    src = _export(tmp_path / "export")
    (tmp_path / "export" / "tokenizer.json").write_bytes(os.urandom(2 * 1024 * 1024))
    out = tmp_path / "out"
    out.mkdir()
    extra = ["--to", "float16"] if verb == "convert" else []
    argv = [verb, src, str(out / "model.onnx"), *extra, "--with-files"]
    done = subprocess.run([sys.executable, "-c", _FSIZE_CLI, *argv], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "File too large" in done.stderr and "Traceback" not in done.stderr
    assert os.listdir(out) == []


def test_cli_dedup_in_place_with_files_says_nothing_to_copy(tmp_path, capsys):
    """dedup --in-place --with-files: the files are already beside the models; said, not
    silently ignored, and the folder keeps them as they were."""
    src = _export(tmp_path / "export")
    before = {name: (tmp_path / "export" / name).read_bytes() for name in OPTIMUM}
    code, out, err = _cli(capsys, "dedup", src, "--in-place", "--with-files")
    assert code == 0, err
    assert "--with-files: nothing to copy, the output is in the source's folder" in out
    assert {name: (tmp_path / "export" / name).read_bytes() for name in OPTIMUM} == before
