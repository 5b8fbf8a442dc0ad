"""The run configs of ``zoopt train`` (:class:`TrainConfig`) and ``zoopt grpo`` (:class:`GRPOConfig`).

Each key is defined once, here: default, help and rule.  ``zoopt/configs/{train,grpo}.yaml``
and ``docs/configuration.md`` are generated from these classes (``python -m zoopt.hparams``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import ENGINES, ESTIMATORS, NOISE, SHAPINGS, engine_refusal
from .schema import Config, ConfigError, Rule, boolean, hp, integer, list_of, mapping, number, section, string

DTYPES = ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16")  # zoopt.models.resolve_dtype's names
FP32_NAMES = ("float32", "fp32")  # GRPO's dtype: the policy it trains holds fp32 weights
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")  # = zoopt.grpo.loss.LOSS_TYPES (tested)
SCALE_REWARDS = ("group", "batch", "none")        # = zoopt.grpo.advantages.SCALE_REWARDS (tested)
TRACKERS = ("none", "tensorboard", "wandb", "trackio")  # = "none" + zoopt.reporting.trackers.TRACKERS (tested)
NOISE_STREAMS = ("counter", "numpy")                     # = zoopt.noise.STREAMS (tested)
UPDATE_RULES = ("sgd", "momentum", "adam", "rmsprop")    # = zoopt.updates.config.RULE_NAMES (tested)
DECAY_TOWARDS = ("base", "zero")                         # = zoopt.updates.rules.DECAY_TOWARDS (tested)
SPACES = ("full", "adapter")                             # = zoopt.adapters.SPACES (tested)
QUANTIZATIONS = ("none", "int8", "int4")                 # = zoopt.adapters.QUANTIZATIONS (tested)


# -- keys both runs have (one definition, used by both classes) -----------------------------
def _model():
    return hp("smollm2-135m", "embedded default (smollm2-135m), tiny, an HF id, or a local HF directory", string())


def _device():
    return hp("cpu", "torch device of the engine: cpu, cuda, cuda:N", string())


def _engine_args():
    return hp({}, "engine options, e.g. vllm: {max_model_len: 512, gpu_memory_utilization: 0.5}; vllm's max_loras "
              "(LoRA slots: the batched population, docs/vllm.md) and max_lora_rank (≥ noise.rank)", mapping())


def _objective():
    return hp("arithmetic", "a registered name (arithmetic, countdown, gsm8k) or path/to/file.py:attr", string())


def _objective_args():
    return hp({}, "keyword arguments of the objective (e.g. arithmetic: {digits: 1})", mapping())


def _seed():
    return hp(0, "base seed: the prompts and rollout seeds of step t depend only on (seed, t)", integer(ge=0))


def _reward_timeout_s():
    return hp(5.0, "time limit of one reward call; a completion past it scores 0.0", number(gt=0))


def _reward_errors():
    return hp("raise", "a step (or an evaluation) in which the reward failed on every completion: raise stops the "
              "run with the reward's own error; zero scores those completions 0.0 and goes on (a partial failure "
              "always scores 0.0, is counted in reward_failed, and its first error is shown once)",
              string(choices=("raise", "zero")))


def _batch_size():
    return hp(64, "generation micro-batch of the engine", integer(ge=1))


def _run_dir():
    return hp(None, "default: runs/<objective>-<timestamp>", string(null=True))


def _export():
    return hp(True, "write an HF directory of the final weights into run_dir/model", boolean())


def _report_to():
    return hp(("none",), "experiment trackers that get each step's record, the evaluations and the final plots: "
              "none, tensorboard, wandb, trackio, or a list of them (each needs its extra, e.g. "
              "pip install \"zoopt-llm[tensorboard]\"; docs/python.md)",
              list_of(string(choices=TRACKERS), single=True))


def _log_every():
    return hp(1, "send every k-th step's record to the report_to trackers (TRL's logging_steps; metrics.jsonl "
              "gets every step)", integer(ge=1))


def _checkpoint_every():
    return hp(0, "also export an HF directory of the weights to run_dir/checkpoint-N after every N-th step "
              "(TRL's save_steps; 0: never)", integer(ge=0))


def check_report_to(value: tuple) -> None:
    """``none`` stands alone: ``[none, wandb]`` is an error."""
    if "none" in value and len(value) > 1:
        raise ConfigError(f"config key 'report_to': none cannot be combined with a tracker, got {list(value)!r}")


def check_engine(engine: str, command: str) -> None:
    """An engine ``command`` cannot run (:data:`zoopt.registry.ENGINE_REFUSALS`) is a one-line error."""
    reason = engine_refusal(engine, command)
    if reason:
        raise ConfigError(f"config key 'engine': {reason}")


#: The engines each command runs adapter space on (GRPO trains the adapter in this process: hf only).
ADAPTER_ENGINES = {"train": ("hf", "vllm", "ray"), "grpo": ("hf",)}


def check_space(space: str, quantization: str, engine: str, command: str = "train") -> None:
    """A quantized base needs adapter space; adapter space runs on :data:`ADAPTER_ENGINES`
    (``zoopt train``: hf, vllm, and ray replicas of hf; ``zoopt grpo``: hf)."""
    if quantization != "none" and space != "adapter":
        raise ConfigError(f"config key 'quantization': {quantization} freezes the base, so it needs space: adapter")
    engines = ADAPTER_ENGINES.get(command, ADAPTER_ENGINES["train"])
    if space == "adapter" and engine not in engines:
        raise ConfigError(f"config key 'space': adapter in zoopt {command} runs on the {', '.join(engines)} "
                          f"engine{'s' if len(engines) > 1 else ''}, not yet on {engine!r}")
    if quantization != "none" and engine == "vllm":
        raise ConfigError(f"config key 'quantization': {quantization} is torchao's, for the hf engine; on vllm a "
                          f"quantized base is a checkpoint vLLM loads quantized (AWQ, GPTQ, bitsandbytes), given as model")


# -- sections -------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoiseConfig(Config):
    """Which noise perturbs the weights, and which parameters move (docs/concepts.md)."""

    prefix = "noise."
    kind: str = hp("gaussian", "gaussian | rademacher | low_rank", string(registry=NOISE))
    include: tuple = hp(("*",), "fnmatch patterns of the parameter names that move", list_of(string()))
    exclude: tuple = hp((), "fnmatch patterns of the parameter names that stay (wins over include)",
                        list_of(string()))
    correlated: bool = hp(False, "one noise stream for every tensor (the ES-at-scale reference code's mode)",
                          boolean())
    rank: int | None = hp(None, "low_rank only: r in ε = A·Bᵀ/√r (unset: 1)", integer(ge=1, null=True),
                          omit_if_none=True)
    stream: str | None = hp(None, "generator of the noise bits: counter (the same on every device) or numpy (the stream "
                            "of runs before it); unset: counter for a new run, the seed log's own on --resume",
                            string(choices=NOISE_STREAMS, null=True), omit_if_none=True)

    def check(self) -> None:
        if self.rank is not None and self.kind != "low_rank":
            raise ConfigError(f"config key 'noise.rank' is only for noise.kind low_rank, got kind {self.kind!r}")


@dataclass(frozen=True)
class UpdateConfig(Config):
    """The update rule over ĝ: θ ← θ + α·rule(ĝ) (docs/concepts.md, docs/update-rules.md)."""

    prefix = "update."
    rule: str = hp("sgd", "sgd (θ ← θ + α·ĝ) | momentum (heavy-ball) | adam | rmsprop; the state a rule keeps "
                   "beside the master is rebuilt from the seed log", string(choices=UPDATE_RULES))
    momentum: float = hp(0.9, "momentum only: μ in v ← μ·v + ĝ", number(ge=0, lt=1))
    nesterov: bool = hp(False, "momentum only: the step is ĝ + μ·v instead of v", boolean())
    b1: float = hp(0.9, "adam only: decay of the first moment", number(ge=0, lt=1))
    b2: float = hp(0.999, "adam only: decay of the second moment", number(ge=0, lt=1))
    eps: float = hp(1.0e-8, "adam and rmsprop: ε in the denominator √(…) + ε", number(gt=0))
    rms_decay: float = hp(0.9, "rmsprop only: ρ in s ← ρ·s + (1−ρ)·ĝ²", number(ge=0, lt=1))
    weight_decay: float = hp(0.0, "λ of decoupled weight decay, after the rule: α·(rule(ĝ) − λ·(θ − θ₀)); 0: off",
                             number(ge=0))
    decay_towards: str = hp("base", "weight decay pulls towards θ₀ = the run's first weights (base) or 0 (zero)",
                            string(choices=DECAY_TOWARDS))
    clip_norm: float | None = hp(None, "clip ĝ to this global L2 norm before the rule (a first pass over every "
                                 "moved tensor); null: no clipping", number(gt=0, null=True))


@dataclass(frozen=True)
class SamplingConfig(Config):
    """How rollouts are sampled."""

    prefix = "sampling."
    temperature: float = hp(0.0, "0: greedy", number(ge=0))
    top_p: float = hp(1.0, "nucleus sampling: the smallest token set with this much probability", number(gt=0, le=1))
    max_new_tokens: int = hp(10, "completion length limit in tokens", integer(ge=1))
    n: int = hp(1, "completions per prompt", integer(ge=1))


@dataclass(frozen=True)
class GRPOSamplingConfig(SamplingConfig):
    """GRPO's rollouts: a group of ``n`` sampled completions per prompt."""

    temperature: float = hp(1.0, "must be > 0: greedy samples of a group are identical", number(gt=0))
    max_new_tokens: int = hp(10, "completion length limit in tokens (also dr_grpo's max_completion_length)",
                             integer(ge=1))
    n: int = hp(8, "the group size G (TRL's num_generations)", integer(ge=2))


@dataclass(frozen=True)
class EvalConfig(Config):
    """The held-out evaluation before and after training (``zoopt eval`` takes the same keys)."""

    prefix = "eval."
    n_problems: int = hp(200, "held-out test problems (0: no evaluation)", integer(ge=0))
    n_samples: int = hp(0, "> 0 adds pass@k and maj@k at `temperature` (k from ks, ≤ n_samples)", integer(ge=0))
    ks: tuple = hp((1,), "the k of pass@k and maj@k (each ≤ n_samples)", list_of(integer(ge=1)))
    temperature: float = hp(1.0, "temperature of the n_samples sampled completions", number(ge=0))
    max_new_tokens: int = hp(10, "completion length limit in tokens", integer(ge=1))
    every: int = hp(0, "also evaluate every N steps (0: only before and after)", integer(ge=0))


# -- the two runs ---------------------------------------------------------------------------
def _space():
    return hp("full", "the weights that train: full (every parameter) | adapter (a LoRA adapter on a frozen base; "
              "docs/adapters.md)", string(choices=SPACES))


def _quantization():
    return hp("none", "the frozen base's weight-only quantization (space: adapter only): none | int8 | int4 (torchao)",
              string(choices=QUANTIZATIONS))


@dataclass(frozen=True)
class AdapterConfig(Config):
    """LoRA's knobs in PEFT's names, used with ``space: adapter`` (docs/adapters.md)."""

    prefix = "adapter."
    r: int = hp(8, "LoRA rank r (W + (lora_alpha/r)·B·A)", integer(ge=1))
    lora_alpha: float = hp(16.0, "LoRA scale numerator", number(gt=0))
    target_modules: tuple | str = hp("all-linear", "all-linear, or the names of the linear modules that get an "
                                     "adapter (q_proj, v_proj, ...)", Rule("list", item=string(), single=True,
                                                                               also=("all-linear",)))
    init_lora_weights: bool | str = hp(True, "true: B = 0, the run starts at the base (PEFT's default); gaussian; "
                                       "false: A and B random", Rule("bool", also=("gaussian",)))
    init_seed: int = hp(0, "torch seed of the adapter's start", integer(ge=0))


@dataclass(frozen=True)
class TrainConfig(Config):
    """The default `zoopt train` run: ES on the embedded SmolLM2-135M-Instruct, two-digit addition.
    Every key can be overridden with `--set key=value` (dotted for sections: sampling.n=4).

    σ=5e-3, α=2.5e-3, N=16 are measured for the 135 M demo (README's table, docs/design.md): its
    greedy outputs do not change at σ=1e-3, hence σ=5e-3, α=σ/2, and 16 members keep a CPU step
    under a minute.  `zoopt.ES`'s defaults are the paper's recipe for 1.5 B models with long
    reasoning instead: σ=1.5e-3, α=2.5e-4, N=32 (tests/test_es.py pins both sets).
    """

    model: str = _model()
    dtype: str = hp("bfloat16", "working weights; the ES master copy is always fp32", string(choices=DTYPES))
    device: str = _device()
    engine: str = hp("hf", "hf | vllm (vLLM needs `make setup-vllm` on a CPU machine) | ray (replicas on a Ray "
                     "cluster: engine_args.replicas, engine_args.inner; docs/ray.md)", string(registry=ENGINES))
    engine_args: dict = _engine_args()
    objective: str = _objective()
    objective_args: dict = _objective_args()
    seed: int = _seed()
    steps: int = hp(15, "ES steps (updates)", integer(ge=0))
    prompts_per_step: int = hp(32, "training prompts of a step; every member of a step sees the same prompts",
                               integer(ge=1))
    estimator: str = hp("one_point", "one_point | two_point (antithetic pairs θ ± σε)", string(registry=ESTIMATORS))
    shaping: str = hp("zscore", "reward shaping: zscore | centered_rank | raw | mean_baseline",
                      string(registry=SHAPINGS))
    scaling: str = hp("paper", "paper: ĝ = (1/N)·Σ wᵢsᵢεᵢ (1/σ absorbed into lr); textbook: ĝ = (1/(Nσ))·Σ wᵢsᵢεᵢ",
                      string(choices=("paper", "textbook")))
    population_size: int = hp(16, "N: members per step (even for two_point)", integer(ge=2))
    sigma: float = hp(5.0e-3, "σ: the perturbation scale, θ + σε (paper: 1.5e-3)", number(gt=0))
    lr: float = hp(2.5e-3, "α: the update is θ ← θ + α·ĝ (paper: 2.5e-4); with an update rule, θ ← θ + α·rule(ĝ)",
                   number(gt=0))
    update: UpdateConfig = section(UpdateConfig, "the update rule over ĝ (sgd, momentum, adam, rmsprop; decay, clipping)")
    noise: NoiseConfig = section(NoiseConfig, "which noise, and which parameters move")
    space: str = _space()
    adapter: AdapterConfig = section(AdapterConfig, "space: adapter only: the LoRA adapter (PEFT's names)")
    quantization: str = _quantization()
    population: str = hp("auto", "how a step's members run: auto (one batched call for low_rank noise where the "
                         "engine has one — hf; vllm with engine_args.max_loras — else member by member) | batched | "
                         "sequential (docs/batched-population.md)",
                         string(choices=("auto", "batched", "sequential")))
    sampling: SamplingConfig = section(SamplingConfig, "rollouts that produce the training reward")
    reward_timeout_s: float = _reward_timeout_s()
    reward_errors: str = _reward_errors()
    eval: EvalConfig = section(EvalConfig, "held-out evaluation before and after training")
    batch_size: int = _batch_size()
    noise_cache_gb: float | str | None = hp(
        "auto", "keep members' fp32 noise for the update (N × 4 bytes/param); a budget per host, split "
        "equally among the engines on it; auto: 40 % of free RAM on CPU, 0 on GPU; null: 0",
        number(ge=0, null=True, also=("auto",)))
    run_dir: str | None = _run_dir()
    export: bool = _export()
    report_to: tuple = _report_to()
    log_every: int = _log_every()
    checkpoint_every: int = _checkpoint_every()

    def check(self) -> None:
        check_engine(self.engine, "train")
        check_report_to(self.report_to)
        check_space(self.space, self.quantization, self.engine)


@dataclass(frozen=True)
class GRPOConfig(Config):
    """The default `zoopt grpo` run: GRPO on the embedded SmolLM2-135M-Instruct, two-digit addition.
    Loss and optimizer defaults are TRL's GRPOConfig defaults (TRL 1.16); see docs/grpo.md.
    Every key can be overridden with `--set key=value` (dotted for sections: sampling.n=4).
    """

    #: the keys :class:`zoopt.grpo.GRPO` takes as keyword arguments (the rest describe the run)
    TRAINER_KEYS = ("prompts_per_step", "loss_type", "epsilon", "epsilon_high", "beta", "scale_rewards",
                    "num_iterations", "lr", "adam_betas", "adam_eps", "weight_decay", "max_grad_norm",
                    "micro_batch_size", "share_prompt", "gradient_checkpointing", "autocast_bf16", "seed",
                    "reward_timeout_s", "reward_errors")

    model: str = _model()
    dtype: str = hp("float32", "GRPO trains fp32 weights, on every engine (autocast_bf16 for bf16 compute)",
                    string(choices=FP32_NAMES))
    device: str = _device()
    engine: str = hp("hf", "hf | vllm (rollouts on vLLM, a separate fp32 policy trains; docs/vllm.md)",
                     string(registry=ENGINES))
    engine_args: dict = _engine_args()
    objective: str = _objective()
    objective_args: dict = _objective_args()
    seed: int = _seed()
    steps: int = hp(12, "GRPO steps (generation batches)", integer(ge=0))
    prompts_per_step: int = hp(32, "prompts of one step; each gets a group of sampling.n completions", integer(ge=1))
    space: str = _space()
    adapter: AdapterConfig = section(AdapterConfig, "space: adapter only: the LoRA adapter (PEFT's names); "
                                     "GRPO trains it with AdamW, the base frozen")
    quantization: str = _quantization()
    sampling: GRPOSamplingConfig = section(GRPOSamplingConfig, "rollouts, same keys and meaning as train's `sampling`")
    loss_type: str = hp("dapo", "grpo | bnpo | dr_grpo | dapo (TRL's default: dapo; docs/grpo.md)",
                        string(choices=LOSS_TYPES))
    epsilon: float = hp(0.2, "clip the ratio to [1 - epsilon, 1 + epsilon_high]", number(ge=0))
    epsilon_high: float | None = hp(None, "null: = epsilon", number(ge=0, null=True))
    beta: float = hp(0.0, "KL(π‖π_ref) coefficient (k3 estimator); 0: no reference model", number(ge=0))
    scale_rewards: str = hp("group", "advantage = (r - group mean) / (std + 1e-4), std of the group, of the batch, "
                            "or none (no division)", string(choices=SCALE_REWARDS))
    num_iterations: int = hp(1, "optimizer steps per generation batch (μ); 1: ratio = 1, plain PG", integer(ge=1))
    lr: float = hp(1.0e-6, "AdamW learning rate (TRL's default)", number(gt=0))
    adam_betas: tuple = hp((0.9, 0.999), "AdamW's [beta1, beta2]", list_of(number(ge=0, lt=1), length=2))
    adam_eps: float = hp(1.0e-8, "AdamW's epsilon", number(ge=0))
    weight_decay: float = hp(0.0, "AdamW's decoupled weight decay", number(ge=0))
    max_grad_norm: float | None = hp(1.0, "clip the gradient norm; 0 or null: no clipping (the norm is logged "
                                     "either way)", number(ge=0, null=True))
    micro_batch_size: int = hp(8, "sequences per forward/backward; the gradient is the full batch's", integer(ge=1))
    share_prompt: bool = hp(False, "run each group's prompt once in the loss (its cache repeated G times): same "
                            "gradient up to rounding, fewer tokens; needs gradient_checkpointing off", boolean())
    gradient_checkpointing: bool = hp(False, "recompute activations in the backward: less memory, more time",
                                      boolean())
    autocast_bf16: bool = hp(False, "forward under bf16 autocast (the weights and AdamW stay fp32)", boolean())
    reward_timeout_s: float = _reward_timeout_s()
    reward_errors: str = _reward_errors()
    eval: EvalConfig = section(EvalConfig, "held-out evaluation before and after training (as train's)")
    batch_size: int = _batch_size()
    run_dir: str | None = _run_dir()
    export: bool = _export()
    report_to: tuple = _report_to()
    log_every: int = _log_every()
    checkpoint_every: int = _checkpoint_every()
    state_every: int = hp(0, "save the trainer state (weights, AdamW moments, step) to run_dir/trainer_state.pt every "
                          "N steps and after the last, so a killed run resumes (zoopt grpo --resume DIR); 0: never",
                          integer(ge=0))

    def check(self) -> None:
        check_engine(self.engine, "grpo")
        check_report_to(self.report_to)
        check_space(self.space, self.quantization, self.engine, "grpo")

    def trainer_kwargs(self) -> dict:
        """The keyword arguments of :class:`zoopt.grpo.GRPO` (validated values)."""
        return {key: getattr(self, key) for key in self.TRAINER_KEYS}
