"""Real exports built from configs with random weights, cached: each function returns a folder.

Nothing is downloaded: every model is a ``transformers`` class built from a config
(fixed seeds, every parameter perturbed by ``0.01 * randn`` so that no two LayerNorm
weights are equal, which exporters would already merge), with a tokenizer made here
(:func:`tiny_tokenizer`) where a tool needs one. Each folder is built once under
:func:`cache_root`, keyed by the packages' versions and the model's config, in a
temporary folder renamed when complete: a second run (or another script) reuses it.

- :func:`gpt2_folder`: optimum's export of a GPT-2-like decoder, with past
  (``model.onnx`` taking and returning the key/value cache) or without;
- :func:`t5_folder`: optimum's export of a T5-like seq2seq without post-processing
  (``encoder_model.onnx``, ``decoder_model.onnx``, ``decoder_with_past_model.onnx``);
- :func:`bert_folder`: optimum's export of a BERT-like encoder (``model.onnx``);
- :func:`llama_folder`: optimum's export of a Llama-like decoder with past;
- :func:`llama_hf_folder`: the same weights as ``transformers`` saves them
  (``config.json``, ``model.safetensors``, tokenizer files);
- :func:`genai_folder`: onnxruntime-genai's builder run on that folder, at ``fp32``
  or ``int4`` (``model.onnx``, ``model.onnx.data``, ``genai_config.json``).

Each takes ``size``: ``"small"`` (the default: the whole ``make realworld`` stays
within minutes) or ``"large"`` (the Llama at about 3.5 GiB of float32 weights; the
others keep their small config). ``REALWORLD_LARGE=1`` makes ``"large"`` the default.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata

BUILD = 1  # bump when a builder changes what it writes: the cache key changes with it
VOCAB = 8192
PACKAGES = ["torch", "transformers", "optimum", "optimum-onnx", "onnxruntime-genai", "onnx"]
PACKAGES += ["accelerate", "onnxruntime"]

GPT2 = {"n_layer": 4, "n_embd": 384, "n_head": 6, "vocab_size": VOCAB, "n_positions": 512}
BERT = {
    "hidden_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 6,
    "intermediate_size": 1536,
    "vocab_size": VOCAB,
}
T5 = {"d_model": 256, "d_kv": 64, "d_ff": 1024, "num_layers": 3, "num_heads": 4}
T5.update(vocab_size=VOCAB, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
LLAMA = {
    "small": {
        "hidden_size": 512,
        "intermediate_size": 1376,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "vocab_size": VOCAB,
    },
    # about 3.5 GiB of float32 weights
    "large": {
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 18,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "vocab_size": 32000,
    },
}
for _c in LLAMA.values():
    _c.update(tie_word_embeddings=False, max_position_embeddings=1024)
SPECIAL = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}

__all__ = [
    "bert_folder",
    "cache_root",
    "default_size",
    "genai_folder",
    "gpt2_folder",
    "llama_folder",
    "llama_hf_folder",
    "t5_folder",
    "tiny_tokenizer",
    "versions",
]


def cache_root() -> str:
    """Where the models are kept: ``$REALWORLD_CACHE``, else ``/var/tmp/onnx-light-realworld``."""
    return os.environ.get("REALWORLD_CACHE", "/var/tmp/onnx-light-realworld")


def default_size() -> str:
    """``"large"`` when ``REALWORLD_LARGE`` is set to a non-empty value other than 0."""
    return "large" if os.environ.get("REALWORLD_LARGE", "0") not in ("", "0") else "small"


def versions() -> dict[str, str]:
    """The installed version of each package an export depends on (``-`` when missing)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "-"
    return out


def _cached(name: str, leaf: str, config: dict, build: Callable[[str], None]) -> str:
    """The folder ``build(folder)`` writes, built once per versions and config.

    It is ``ROOT/NAME-KEY/LEAF``: ``LEAF`` names the model where a verb names its
    outputs after their folder (``dedup --out`` of two builder folders writes
    ``fp32_model.onnx`` and ``int4_model.onnx``). A failed build leaves nothing.
    """
    key = json.dumps([BUILD, name, config, versions()], sort_keys=True)
    top = os.path.join(cache_root(), f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}")
    folder = os.path.join(top, leaf)
    if os.path.exists(os.path.join(top, ".done")):
        return folder
    tmp = f"{top}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, leaf))
    try:
        build(os.path.join(tmp, leaf))
        with open(os.path.join(tmp, "build.json"), "w") as f:
            json.dump({"name": name, "config": config, "versions": versions()}, f, indent=1)
        open(os.path.join(tmp, ".done"), "w").close()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(top, ignore_errors=True)
    os.replace(tmp, top)
    return folder


def _offline() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _perturb(model, seed: int):
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return model.eval()


def tiny_tokenizer(folder: str, vocab_size: int = VOCAB) -> None:
    """Write a word-level tokenizer of ``vocab_size`` tokens (``<s>``, ``</s>``, ``<pad>``,
    then ``t3`` ... ) into ``folder``, as ``transformers`` saves one: a loader that needs
    tokenizer files finds them, nothing is downloaded."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2}
    vocab.update({f"t{i}": i for i in range(3, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<pad>",
    )
    fast.save_pretrained(folder)


def _optimum_export(model, folder: str, task: str, **kwargs) -> None:
    from optimum.exporters.onnx import onnx_export_from_model

    onnx_export_from_model(model, folder, task=task, do_validation=False, **kwargs)


def gpt2_folder(past: bool = True) -> str:
    """optimum's export of a GPT-2-like decoder (:data:`GPT2`): ``model.onnx`` with the
    key/value cache as inputs and outputs (``past=True``) or without, and its config files."""
    name = "gpt2" if past else "gpt2-nopast"

    def build(folder: str) -> None:
        from transformers import GPT2Config, GPT2LMHeadModel

        _offline()
        model = _perturb(GPT2LMHeadModel(GPT2Config(**GPT2, **SPECIAL)), 2)
        task = "text-generation-with-past" if past else "text-generation"
        _optimum_export(model, folder, task)

    return _cached(name, name, GPT2, build)


def bert_folder() -> str:
    """optimum's export of a BERT-like encoder (:data:`BERT`): ``model.onnx`` and config."""

    def build(folder: str) -> None:
        from transformers import BertConfig, BertModel

        _offline()
        model = _perturb(BertModel(BertConfig(**BERT)), 4)
        _optimum_export(model, folder, "feature-extraction")

    return _cached("bert", "bert", BERT, build)


def t5_folder() -> str:
    """optimum's export of a T5-like seq2seq (:data:`T5`) without post-processing: its
    encoder, decoder and decoder-with-past as three files sharing weights, and config."""

    def build(folder: str) -> None:
        from transformers import T5Config, T5ForConditionalGeneration

        _offline()
        model = _perturb(T5ForConditionalGeneration(T5Config(**T5)), 1)
        _optimum_export(model, folder, "text2text-generation-with-past", no_post_process=True)

    return _cached("t5", "t5", T5, build)


def llama_hf_folder(size: str | None = None) -> str:
    """A Llama-like model (:data:`LLAMA` ``[size]``) as ``transformers`` saves it:
    ``config.json``, ``generation_config.json``, ``model.safetensors`` and a tokenizer."""
    size = size or default_size()

    def build(folder: str) -> None:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        _offline()
        torch.manual_seed(0)
        model = _perturb(LlamaForCausalLM(LlamaConfig(**LLAMA[size], **SPECIAL)), 3)
        model.save_pretrained(folder, safe_serialization=True)
        tiny_tokenizer(folder, LLAMA[size]["vocab_size"])

    return _cached(f"llama-hf-{size}", "llama", LLAMA[size], build)


def llama_folder(size: str | None = None) -> str:
    """optimum's export, with past, of the weights of :func:`llama_hf_folder`."""
    size = size or default_size()
    source = llama_hf_folder(size)

    def build(folder: str) -> None:
        from transformers import LlamaForCausalLM

        _offline()
        model = LlamaForCausalLM.from_pretrained(source).eval()
        _optimum_export(model, folder, "text-generation-with-past")

    return _cached(f"llama-{size}", "llama", LLAMA[size], build)


def genai_folder(precision: str = "fp32", size: str | None = None) -> str:
    """onnxruntime-genai's builder (``python -m onnxruntime_genai.models.builder -i HF -p
    PRECISION -e cpu -o OUT``) on :func:`llama_hf_folder`: ``model.onnx``, its data file,
    ``genai_config.json`` and the tokenizer files. ``precision``: ``fp32`` or ``int4``."""
    size = size or default_size()
    source = llama_hf_folder(size)

    def build(folder: str) -> None:
        cache = folder + "-cache"
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", source]
        cmd += ["-p", precision, "-e", "cpu", "-o", folder, "-c", cache]
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if done.returncode:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise RuntimeError(f"onnxruntime-genai's builder failed ({' '.join(cmd)}):\n{tail}")

    return _cached(f"genai-{precision}-{size}", precision, LLAMA[size], build)
