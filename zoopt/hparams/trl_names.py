"""``ESConfig``: ``zoopt train``'s keys under TRL's names, for ``zoopt.trl.ESTrainer``.

Where ES and TRL's ``GRPOConfig`` share a concept, :class:`ESConfig` takes TRL's name
(:data:`TRL_NAMES`: ``learning_rate`` is ``lr``, ``num_generations`` is ``sampling.n``, ...);
ES's own keys keep ``zoopt train``'s names (:data:`ES_KEYS`: ``sigma``, ``population_size``, ...).
Each field takes its default, help and rule from the :class:`~zoopt.hparams.TrainConfig` key it
stands for, so there is one definition of each; the defaults are zoopt's, not TRL's (ES's
``learning_rate`` is α of θ ← θ + α·ĝ, 2.5e-3, where GRPO's AdamW takes 1e-6).
:meth:`ESConfig.train_config` is the ``train`` config it means.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass

from .keys import key_field
from .run_configs import NoiseConfig, TrainConfig, UpdateConfig
from .schema import Config, boolean, from_dict, hp, list_of, number, section, to_dict

#: ESConfig field (TRL's ``GRPOConfig`` name) → the ``zoopt train`` key of the same concept
TRL_NAMES = {
    "learning_rate": "lr",
    "max_completion_length": "sampling.max_new_tokens",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "num_generations": "sampling.n",
    "per_device_train_batch_size": "prompts_per_step",
    "max_steps": "steps",
    "logging_steps": "log_every",
    "save_steps": "checkpoint_every",
    "output_dir": "run_dir",
    "seed": "seed",
    "report_to": "report_to",
}
#: ES's own keys (no TRL counterpart), under their ``zoopt train`` names
ES_KEYS = ("sigma", "population_size", "estimator", "shaping", "scaling", "update", "noise", "population", "engine",
           "engine_args", "device", "noise_cache_gb", "reward_timeout_s", "reward_errors")
#: TRL names ESConfig has that are not ``zoopt train`` keys (``bf16`` picks ``dtype``)
TRL_ONLY = ("bf16", "reward_weights", "disable_tqdm")


def same_as(key: str):
    """A field standing for ``TrainConfig``'s ``key`` (dotted for a section's): its default,
    rule and help, the help prefixed with the key."""
    f = key_field(key)
    default = f.default_factory() if f.default is MISSING else f.default
    return hp(default, f"`{key}`: {f.metadata['help']}", f.metadata["rule"])


@dataclass(frozen=True)
class ESConfig(Config):
    """`zoopt.trl.ESConfig`: the arguments of `zoopt.trl.ESTrainer`, TRL's `GRPOConfig` names where the
    concept is the same (the `zoopt train` key each stands for opens its help), ES's own keys under their
    `zoopt train` names.  Defaults are zoopt's."""

    learning_rate: float = same_as("lr")
    max_completion_length: int = same_as("sampling.max_new_tokens")
    temperature: float = same_as("sampling.temperature")
    top_p: float = same_as("sampling.top_p")
    num_generations: int = same_as("sampling.n")
    per_device_train_batch_size: int = same_as("prompts_per_step")
    max_steps: int = same_as("steps")
    logging_steps: int = same_as("log_every")
    save_steps: int = same_as("checkpoint_every")
    output_dir: str | None = same_as("run_dir")
    seed: int = same_as("seed")
    report_to: tuple = same_as("report_to")
    bf16: bool = hp(True, "`dtype`: bfloat16 working weights, else float32 (the ES master copy is always fp32; "
                    "a model object trains in its own dtype)", boolean())
    reward_weights: tuple | None = hp(None, "one weight per reward function, r = Σ w_f·r_f (TRL's); null: 1.0 each",
                                      list_of(number(), null=True))
    disable_tqdm: bool = hp(False, "no progress display", boolean())
    sigma: float = same_as("sigma")
    population_size: int = same_as("population_size")
    estimator: str = same_as("estimator")
    shaping: str = same_as("shaping")
    scaling: str = same_as("scaling")
    update: UpdateConfig = section(UpdateConfig, "`update`: the update rule over ĝ (sgd, momentum, adam, rmsprop; "
                                   "decay, clipping)")
    noise: NoiseConfig = section(NoiseConfig, "`noise`: which noise, and which parameters move")
    population: str = same_as("population")
    engine: str = same_as("engine")
    engine_args: dict = same_as("engine_args")
    device: str = same_as("device")
    noise_cache_gb: float | str | None = same_as("noise_cache_gb")
    reward_timeout_s: float = same_as("reward_timeout_s")
    reward_errors: str = same_as("reward_errors")

    def check(self) -> None:
        TrainConfig(report_to=self.report_to)  # report_to's cross-check (none stands alone)

    def train_config(self, **keys) -> dict:
        """The ``zoopt train`` config these arguments mean (``keys``: more ``train`` keys, e.g.
        ``model``), validated: ``train.yaml``'s defaults with each field at its key."""
        values = to_dict(self)
        nested: dict = {"dtype": "bfloat16" if self.bf16 else "float32"}
        for name, key in (*TRL_NAMES.items(), *((k, k) for k in ES_KEYS)):
            head, _, rest = key.partition(".")
            if rest:
                nested.setdefault(head, {})[rest] = values[name]
            else:
                nested[key] = values[name]
        return to_dict(from_dict(TrainConfig, {**nested, **keys}))


__all__ = ["ESConfig", "TRL_NAMES", "ES_KEYS", "TRL_ONLY", "same_as"]
