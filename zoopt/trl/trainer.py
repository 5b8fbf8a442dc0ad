"""``ESTrainer``: ES on TRL ``GRPOTrainer``'s arguments, trained by :func:`zoopt.fit`
(the package face :mod:`zoopt.trl` says how a TRL script uses it)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from ..adapters import AdapterSpace
from ..callbacks import Callback
from ..config import ConfigError
from ..engines.hf import HFEngine
from ..hparams import ESConfig, EvalConfig, to_dict
from ..rewards.functions import RewardFunction, RewardFunctions
from ..runs.rundir import RunDir
from ..types import RunResult
from ..workflows.builders import build_engine, build_es, evaluate_run, noise_cache_bytes, run_dir_for, sampling_from
from ..workflows.fit import fit


class ESTrainer:
    """ES on TRL's arguments (see :mod:`zoopt.trl`).

    Args:
        model: a model id, a local directory, ``smollm2-135m``/``tiny``, or a ``PreTrainedModel``
            (trained in place, in its own dtype; the ``hf`` engine).
        reward_funcs: a TRL reward function or a list of them.
        args: :class:`~zoopt.hparams.ESConfig` (default: ``ESConfig()``).
        train_dataset: a ``datasets.Dataset`` with a ``prompt`` column.
        eval_dataset: held-out rows, evaluated (greedy) before and after training; None: none.
        processing_class: the tokenizer of a ``PreTrainedModel`` (default: its config's); a model
            id or path loads its own, and giving one with it is an error.
        callbacks: :class:`zoopt.callbacks.Callback` s (``EarlyStopping``, your own).
        peft_config: a PEFT ``LoraConfig``, as TRL takes it: ES trains that adapter on the frozen
            base (``space: adapter``, :class:`~zoopt.adapters.AdapterSpace.from_lora_config`);
            with a model id or path only (the seed log must be able to reload the base).
    """

    def __init__(self, model: str | torch.nn.Module, reward_funcs: RewardFunction | Sequence[RewardFunction],
                 args: ESConfig | None = None, train_dataset=None, eval_dataset=None, processing_class=None,
                 callbacks: Sequence[Callback] | None = None, peft_config=None) -> None:
        self.args = args if args is not None else ESConfig()
        if not isinstance(self.args, ESConfig):
            raise TypeError(f"args must be a zoopt.trl.ESConfig, got {type(self.args).__name__}")
        self.objective = RewardFunctions(reward_funcs, train_dataset, eval_dataset, weights=self.args.reward_weights)
        self.eval_dataset = eval_dataset
        space = {}
        if peft_config is not None:
            if not isinstance(model, str):
                raise ConfigError("peft_config: pass the base model's id or path, not a model object (its seed log "
                                  "replays onto a base that can be loaded again)")
            try:
                space = {"space": "adapter", "adapter": AdapterSpace.from_lora_config(peft_config).to_dict()}
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.cfg = self.args.train_config(objective=self.objective.name, **space,
                                          **({"model": model} if isinstance(model, str) else {}))
        self.es = build_es(self.cfg)
        self.engine = self._engine(model, processing_class)
        self.callbacks = list(callbacks or [])
        self.result: RunResult | None = None

    def _engine(self, model, processing_class):
        cfg = self.cfg
        if isinstance(model, str):
            if processing_class is not None:
                raise ValueError("processing_class goes with a model object; a model id or path loads its own tokenizer")
            return build_engine(cfg, self.objective)
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a model id or path, or a PreTrainedModel, got {type(model).__name__}")
        if cfg["engine"] != "hf":
            raise ConfigError(f"a model object trains in the hf engine, got engine {cfg['engine']!r}: pass its id or path")
        if processing_class is None:
            source = model.config.name_or_path
            if not source:
                raise ValueError("processing_class is needed: the model's config names no tokenizer to load")
            from transformers import AutoTokenizer

            processing_class = AutoTokenizer.from_pretrained(source)
        return HFEngine(model, processing_class, batch_size=int(cfg["batch_size"]), population=cfg["population"],
                        noise_cache_bytes=noise_cache_bytes(cfg["noise_cache_gb"], str(cfg["device"])))

    @property
    def model(self) -> torch.nn.Module | None:
        """The module being trained (None for an engine whose weights live elsewhere, e.g. vLLM)."""
        return self.engine.module

    def train(self, resume_from_checkpoint: bool | None = None) -> RunResult:
        """ES-train to ``max_steps`` with :func:`zoopt.fit`; ``resume_from_checkpoint=True``
        continues the run in ``output_dir`` (a fresh trainer on the same base model and objects)."""
        cfg = self.cfg
        run_dir = cfg["run_dir"] or run_dir_for(cfg, prefix="es-")
        self.result = fit(self.engine, self.objective, self.es, steps=cfg["steps"],
                          prompts_per_step=cfg["prompts_per_step"], sampling=sampling_from(cfg), run_dir=run_dir,
                          callbacks=self.callbacks, report_to=cfg["report_to"], evaluation=self._evaluation(),
                          resume=bool(resume_from_checkpoint), log_every=cfg["log_every"],
                          checkpoint_every=cfg["checkpoint_every"], reward_timeout_s=cfg["reward_timeout_s"],
                          reward_errors=cfg["reward_errors"], batch_size=cfg["batch_size"],
                          progress=not self.args.disable_tqdm)
        return self.result

    def _evaluation(self) -> EvalConfig | None:
        if self.eval_dataset is None:
            return None
        return EvalConfig(n_problems=len(self.eval_dataset), max_new_tokens=self.cfg["sampling"]["max_new_tokens"])

    def evaluate(self) -> dict:
        """The greedy held-out evaluation of the current weights on ``eval_dataset`` (its summary)."""
        evaluation = self._evaluation()
        if evaluation is None:
            raise ValueError("evaluate() needs an eval_dataset")
        return evaluate_run(self.engine, self.objective, {**self.cfg, "eval": to_dict(evaluation)})

    def save_model(self, output_dir: str | Path | None = None) -> Path:
        """Write an HF directory of the current weights: ``output_dir``, else ``output_dir/model`` of the run."""
        if output_dir is None:
            if self.result is None:
                raise ValueError("save_model() before train() needs an output_dir")
            output_dir = RunDir(self.result.run_dir).model_path
        return self.engine.export_pretrained(output_dir)

