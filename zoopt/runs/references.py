"""Model references for the analysis commands: names, HF directories and training runs.

A *model spec* is one of

- a model name understood by :func:`zoopt.models.load_model` (``"smollm2-135m"``, ``"tiny:3"``);
- an HF directory (holds ``config.json``), e.g. a run's exported ``model/``, or a PEFT adapter
  directory (``adapter_config.json``, an adapter-space run's ``model/``);
- a training run directory (holds ``model/`` plus ``seedlog.json`` or ``config.yaml``), which
  stands for its exported final weights ``RUN/model``.

Weights are compared on ``model.named_parameters()``, which lists a tied tensor once (Llama's
``lm_head.weight`` tied to ``model.embed_tokens.weight`` appears only as the latter), so a tie is
never counted twice and the two sides always have the same keys for the same architecture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..models import ModelLoadError, is_model_dir, load_model
from .atomic import atomic_directory
from .rundir import RunDir


def is_run_dir(spec: str | Path) -> bool:
    """True for a directory with a training run's ``seedlog.json`` or ``config.yaml``."""
    run = RunDir(Path(spec).expanduser())
    return run.path.is_dir() and (run.seedlog_path.is_file() or run.config_path.is_file())


def resolve_model(spec: str | Path) -> str:
    """The :func:`~zoopt.models.load_model` argument for ``spec``: ``RUN/model`` for a run
    directory (a run without an exported ``model/`` is a one-line FileNotFoundError naming it),
    the spec itself otherwise."""
    path = Path(spec).expanduser()
    if is_run_dir(path) and not is_model_dir(path):
        model = path / "model"
        if not is_model_dir(model):
            raise FileNotFoundError(f"run directory {str(spec)!r} has no exported model/ "
                                    f"(train with export: true, or run `zoopt export {spec} --out DIR`)")
        return str(model)
    return str(spec)


def run_config(spec: str | Path) -> dict | None:
    """The ``config.yaml`` of a run directory (or of the run that holds an HF ``model/`` dir),
    else ``None``."""
    path = Path(spec).expanduser()
    for cand in (path, path.parent) if path.name == "model" else (path,):
        if RunDir(cand).config_path.is_file():
            return RunDir(cand).read_config()
    return None


def model_label(spec: str | Path) -> str:
    """A short file-name-safe label: ``tiny:3`` → ``tiny-3``, ``runs/x/model`` → ``x``."""
    path = Path(str(spec)).expanduser()
    name = path.parent.name if path.name == "model" and path.parent.name else path.name
    name = name or str(spec)
    return "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name).strip("-.") or "model"


@dataclass
class LoadedModel:
    """``params``: detached fp32 clones of ``model.named_parameters()`` (independent of the
    module, so writing other values into ``model`` never changes them)."""

    spec: str
    path: str
    model: torch.nn.Module
    tokenizer: object
    params: dict[str, torch.Tensor]


def load_params(spec: str | Path, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load ``spec`` (see the module doc) and clone its named parameters."""
    path = resolve_model(spec)
    try:
        model, tokenizer = load_model(path, dtype=dtype, device=device)
    except ModelLoadError as exc:  # the CLI reports ValueErrors as one-line errors
        raise ValueError(str(exc)) from None
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return LoadedModel(str(spec), path, model, tokenizer, params)


def run_dtype(spec: str | Path) -> str:
    """The dtype the run behind ``spec`` worked in: the ``dtype`` of its ``config.yaml`` (a run
    directory, or the ``model/`` inside one; for a ``zoopt compare``/``zoopt study`` method, which
    keeps one config per phase, its first phase's ``phase0-*/config.yaml``: every phase shares
    the method's engine), else ``"float32"`` (an HF directory or a name of unknown provenance is
    taken as it is)."""
    path = Path(str(spec)).expanduser()
    if not path.exists():
        return "float32"
    cfg = run_config(path)
    if cfg is None:
        method = path.parent if path.name == "model" else path
        phases = sorted(method.glob("phase0-*/config.yaml"))
        cfg = RunDir(phases[0].parent).read_config() if phases else None
    return str((cfg or {}).get("dtype") or "float32")


def load_base(spec: str | Path, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """The base weights a run in ``dtype`` started from, as fp32 tensors in ``params``.

    A run's engine loads its base in the run's dtype (:func:`zoopt.models.load_model`: the HF
    loader's cast, or ``tensor.to(dtype)`` for ``tiny``) and keeps an fp32 master made of those
    weights (:class:`zoopt.engines.weights.MasterWeights`), which is what its ``model/`` holds
    (the master, exported).  So the run's zero point is ``θ₀' = fp32(cast_dtype(θ₀))``, not the
    fp32 base ``θ₀``: this loads the base the same way and widens each parameter to fp32, so
    ``TRAINED − θ₀'`` is the update alone (a run whose every coefficient was 0.0 gives Δ = 0
    exactly, in every dtype), never the base's rounding to bf16/fp16.  For ``float32`` it is
    :func:`load_params`.
    """
    loaded = load_params(spec, dtype=dtype, device=device)
    loaded.params = {n: p.float() for n, p in loaded.params.items()}
    return loaded


@torch.no_grad()
def save_with_params(loaded: LoadedModel, params: dict[str, torch.Tensor],
                     directory: str | Path) -> Path:
    """Write ``loaded.model`` with its named parameters set to ``params`` as an HF directory
    (config, generation config, tokenizer, safetensors) loadable by ``load_model``.

    ``params`` must have exactly the keys of ``loaded.params`` (a missing or extra key is a
    one-line ValueError naming it).  Values are copied in place (a tie stays a tie), saved with
    the model's own ``save_pretrained``, and the module is set back to ``loaded.params``
    afterwards.  The directory appears atomically: written beside ``directory``, then renamed
    into place (replacing an old one).
    """
    for key in params.keys() ^ loaded.params.keys():
        where = "params" if key in params else "the model"
        raise ValueError(f"save_with_params: key {key!r} is only in {where}")
    named = dict(loaded.model.named_parameters())
    try:
        for name, p in named.items():
            p.copy_(params[name])
        with atomic_directory(directory) as tmp:
            loaded.model.save_pretrained(str(tmp))
            loaded.tokenizer.save_pretrained(str(tmp))
    finally:
        for name, p in named.items():
            p.copy_(loaded.params[name])
    directory = Path(directory).absolute()
    return directory
