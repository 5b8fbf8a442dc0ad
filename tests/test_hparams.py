"""One definition per hyper-parameter: ``zoopt.hparams`` drives defaults, validation, GRPO and the docs."""

import dataclasses
from pathlib import Path

import pytest
import yaml

from zoopt.config import ConfigError, default_config, load_config
from zoopt.engines.base import Sampling
from zoopt.hparams import (GENERATED, GRPOConfig, NoiseConfig, TrainConfig, from_dict, to_dict, to_yaml,
                           validate)

ROOT = Path(__file__).resolve().parents[1]

# The hand-written zoopt/configs/{train,grpo}.yaml before zoopt.hparams (comments dropped): the
# defaults must stay these values, with these types and this key order.  Keys added since:
# `population` (the batched low-rank path, docs/batched-population.md); `reward_errors` (zoopt.rewards.scoring);
# `report_to`, `log_every`, `checkpoint_every` (experiment trackers and TRL's logging_steps/save_steps);
# `update` (the update rule over ĝ, zoopt.updates: its default sgd is the rule before it existed);
# `space`, `adapter`, `quantization` (adapter space, docs/adapters.md: its default full is the space before it existed).
OLD_TRAIN = """
model: smollm2-135m
dtype: bfloat16
device: cpu
engine: hf
engine_args: {}
objective: arithmetic
objective_args: {}
seed: 0
steps: 15
prompts_per_step: 32
estimator: one_point
shaping: zscore
scaling: paper
population_size: 16
sigma: 5.0e-3
lr: 2.5e-3
update:
  rule: sgd
  momentum: 0.9
  nesterov: false
  b1: 0.9
  b2: 0.999
  eps: 1.0e-8
  rms_decay: 0.9
  weight_decay: 0.0
  decay_towards: base
  clip_norm: null
noise:
  kind: gaussian
  include: ["*"]
  exclude: []
  correlated: false
space: full
adapter:
  r: 8
  lora_alpha: 16.0
  target_modules: all-linear
  init_lora_weights: true
  init_seed: 0
quantization: none
population: auto
sampling:
  temperature: 0.0
  top_p: 1.0
  max_new_tokens: 10
  n: 1
reward_timeout_s: 5.0
reward_errors: raise
eval:
  n_problems: 200
  n_samples: 0
  ks: [1]
  temperature: 1.0
  max_new_tokens: 10
  every: 0
batch_size: 64
noise_cache_gb: auto
run_dir: null
export: true
report_to: [none]
log_every: 1
checkpoint_every: 0
"""
OLD_GRPO = """
model: smollm2-135m
dtype: float32
device: cpu
engine: hf
engine_args: {}
objective: arithmetic
objective_args: {}
seed: 0
steps: 12
prompts_per_step: 32
space: full
adapter:
  r: 8
  lora_alpha: 16.0
  target_modules: all-linear
  init_lora_weights: true
  init_seed: 0
quantization: none
sampling:
  temperature: 1.0
  top_p: 1.0
  max_new_tokens: 10
  n: 8
loss_type: dapo
epsilon: 0.2
epsilon_high: null
beta: 0.0
scale_rewards: group
num_iterations: 1
lr: 1.0e-6
adam_betas: [0.9, 0.999]
adam_eps: 1.0e-8
weight_decay: 0.0
max_grad_norm: 1.0
micro_batch_size: 8
share_prompt: false
gradient_checkpointing: false
autocast_bf16: false
reward_timeout_s: 5.0
reward_errors: raise
eval:
  n_problems: 200
  n_samples: 0
  ks: [1]
  temperature: 1.0
  max_new_tokens: 10
  every: 0
batch_size: 64
run_dir: null
export: true
report_to: [none]
log_every: 1
checkpoint_every: 0
state_every: 0
"""


def assert_identical(a, b, path="config"):
    """Equal values of the same types, and dict keys in the same order."""
    assert type(a) is type(b), f"{path}: {a!r} ({type(a).__name__}) vs {b!r} ({type(b).__name__})"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} vs {list(b)}"
        for key in a:
            assert_identical(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


@pytest.mark.parametrize("base,old", [("train", OLD_TRAIN), ("grpo", OLD_GRPO)])
def test_defaults_are_the_old_yaml_values_bit_for_bit(base, old):
    old = yaml.safe_load(old)
    assert_identical(default_config(base), old)
    assert_identical(load_config(base=base), old)
    assert default_config("train")["sigma"] == 0.005 and default_config("grpo")["lr"] == 1e-6


@pytest.mark.parametrize("rel", sorted(GENERATED))
def test_generated_files_are_committed_as_generated(rel):
    committed = (ROOT / rel).read_text()
    assert committed == GENERATED[rel](), (f"{rel} differs from zoopt.hparams; regenerate it with "
                                           f"`.venv/bin/python -m zoopt.hparams` and commit the result")


@pytest.mark.parametrize("cls,base", [(TrainConfig, "train"), (GRPOConfig, "grpo")])
def test_generated_yaml_holds_the_defaults_and_every_help(cls, base):
    text = to_yaml(cls)
    assert_identical(yaml.safe_load(text), default_config(base))
    for f in dataclasses.fields(cls):
        assert f.metadata["help"] and f.metadata["help"] in text, f.name
    assert load_config(ROOT / "zoopt" / "configs" / f"{base}.yaml", base=base) == default_config(base)


def test_every_key_has_help_and_a_rule():
    def walk(cls):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
            if "section" in f.metadata:
                walk(f.metadata["section"])
            else:
                assert f.metadata["rule"].describe(), f.name

    walk(TrainConfig)
    walk(GRPOConfig)


# -- bad values: one line that names the key, the rule and the value ------------------------
BAD = [  # (base, override, the whole message, or a part of it)
    ("train", "sigma=abc", "config key 'sigma' must be a number > 0, got 'abc'"),
    ("train", "sigma=-1", "config key 'sigma' must be a number > 0, got -1"),
    ("train", "sigma=.nan", "config key 'sigma' must be a number > 0, got nan"),
    ("train", "sigma=true", "config key 'sigma' must be a number > 0, got True"),
    ("train", "lr=0", "config key 'lr' must be a number > 0, got 0"),
    ("train", "population_size=1.5", "config key 'population_size' must be an integer ≥ 2, got 1.5"),
    ("train", "population_size=1", "config key 'population_size' must be an integer ≥ 2, got 1"),
    ("train", "seed=-3", "config key 'seed' must be an integer ≥ 0, got -3"),
    ("train", "sampling.temperature=-0.1", "config key 'sampling.temperature' must be a number ≥ 0, got -0.1"),
    ("train", "sampling.top_p=0", "config key 'sampling.top_p' must be a number in (0, 1], got 0"),
    ("train", "noise.kind=banana", "config key 'noise.kind' must be a registered noise (gaussian,"),
    ("train", "noise.include=layer", "config key 'noise.include' must be a list of strings, got 'layer'"),
    ("train", "noise.correlated=maybe", "config key 'noise.correlated' must be true or false, got 'maybe'"),
    ("train", "noise.rank=0", "config key 'noise.rank' must be an integer ≥ 1 or null, got 0"),
    ("train", "noise.rank=4", "config key 'noise.rank' is only for noise.kind low_rank, got kind 'gaussian'"),
    ("train", "estimator=three_point", "config key 'estimator' must be a registered estimator (one_point,"),
    ("train", "scaling=fancy", "config key 'scaling' must be one of paper, textbook, got 'fancy'"),
    ("train", "dtype=float8", "config key 'dtype' must be one of float32, bfloat16, float16"),
    ("train", "eval.ks=[1, 0]", "config key 'eval.ks' must be a list of integers ≥ 1, got [1, 0]"),
    ("train", "noise_cache_gb=lots", "config key 'noise_cache_gb' must be 'auto', a number ≥ 0 or null, got 'lots'"),
    ("train", "engine_args=3", "config key 'engine_args' must be a mapping, got 3"),
    ("train", "run_dir=[a]", "config key 'run_dir' must be a string or null, got ['a']"),
    ("train", "noise=gaussian", "config key 'noise' is a section; set its keys (noise.KEY=...)"),
    ("train", "sigmma=0.1", "unknown config key 'sigmma'; did you mean 'sigma'?"),
    ("train", "noise.knd=gaussian", "unknown config key 'noise.knd'; did you mean 'noise.kind'?"),
    ("grpo", "loss_type=ppo", "config key 'loss_type' must be one of grpo, bnpo, dr_grpo, dapo, got 'ppo'"),
    ("grpo", "adam_betas=[1]", "config key 'adam_betas' must be a list of 2 numbers in [0, 1), got [1]"),
    ("grpo", "adam_betas=[0.9, 1.0]", "config key 'adam_betas' must be a list of 2 numbers in [0, 1)"),
    ("grpo", "scale_rewards=std", "config key 'scale_rewards' must be one of group, batch, none, got 'std'"),
    ("grpo", "sampling.temperature=0", "config key 'sampling.temperature' must be a number > 0, got 0"),
    ("grpo", "sampling.n=1", "config key 'sampling.n' must be an integer ≥ 2, got 1"),
    ("grpo", "epsilon_high=-0.1", "config key 'epsilon_high' must be a number ≥ 0 or null, got -0.1"),
    ("grpo", "micro_batch_size=2.5", "config key 'micro_batch_size' must be an integer ≥ 1, got 2.5"),
    ("grpo", "gradient_checkpointing=1", "config key 'gradient_checkpointing' must be true or false, got 1"),
    ("grpo", "sigma=0.01", "unknown config key 'sigma'"),
    ("grpo", "los_type=grpo", "unknown config key 'los_type'; did you mean 'loss_type'?"),
    ("train", "report_to=mlflow", "config key 'report_to' must be one of none, tensorboard, wandb, trackio, or a list "
                                  "of them, got 'mlflow'"),
    ("train", "report_to=[none, wandb]", "config key 'report_to': none cannot be combined with a tracker"),
    ("grpo", "report_to=[none, wandb]", "config key 'report_to': none cannot be combined with a tracker"),
    ("train", "update.rule=adamw", "config key 'update.rule' must be one of sgd, momentum, adam, rmsprop, got 'adamw'"),
    ("train", "update.momentum=1", "config key 'update.momentum' must be a number in [0, 1), got 1"),
    ("train", "update.b2=-0.1", "config key 'update.b2' must be a number in [0, 1), got -0.1"),
    ("train", "update.eps=0", "config key 'update.eps' must be a number > 0, got 0"),
    ("train", "update.weight_decay=-1", "config key 'update.weight_decay' must be a number ≥ 0, got -1"),
    ("train", "update.decay_towards=one", "config key 'update.decay_towards' must be one of base, zero, got 'one'"),
    ("train", "update.clip_norm=0", "config key 'update.clip_norm' must be a number > 0 or null, got 0"),
    ("train", "update.nesterov=1", "config key 'update.nesterov' must be true or false, got 1"),
    ("train", "update=adam", "config key 'update' is a section; set its keys (update.KEY=...)"),
    ("train", "update.rul=adam", "unknown config key 'update.rul'; did you mean 'update.rule'?"),
]


@pytest.mark.parametrize("base,override,message", BAD, ids=[f"{b}:{o}" for b, o, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_key(base, override, message):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[override], base=base)
    text = str(info.value)
    assert text.startswith(message) and "\n" not in text, text
    assert override.split("=")[0].split(".")[0] in text


@pytest.mark.parametrize("base,override,message", [BAD[0], BAD[5], BAD[10], BAD[25], BAD[26], BAD[30]],
                         ids=["sigma", "population_size", "noise.kind", "loss_type", "adam_betas", "sampling.n"])
def test_the_cli_prints_one_line_and_returns_2(base, override, message, capsys, tmp_path):
    from zoopt.cli import main

    command = {"train": "train", "grpo": "grpo"}[base]
    code = main([command, "--quiet", "--model", "tiny", "--set", override, "--set", f"run_dir={tmp_path}/r"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err, err
    assert not (tmp_path / "r").exists()


def test_a_bad_value_in_a_config_file_names_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  max_new_tokens: ten\n")
    with pytest.raises(ConfigError, match=r"^config key 'sampling.max_new_tokens' must be an integer ≥ 1, got 'ten'$"):
        load_config(path)


# -- what is coerced, and what is not ---------------------------------------------------------
def test_unambiguous_coercions_only():
    cfg = load_config(overrides=["sigma=5e-3", "lr=1", "population_size=8.0", "noise.include=[a, b]"])
    assert cfg["sigma"] == 0.005 and type(cfg["sigma"]) is float  # YAML 1.1 reads 5e-3 as a string
    assert cfg["lr"] == 1.0 and type(cfg["lr"]) is float
    assert cfg["population_size"] == 8 and type(cfg["population_size"]) is int
    assert cfg["noise"]["include"] == ["a", "b"]  # a list in the dict (yaml.safe_dump-able), a tuple in the dataclass
    yaml.safe_dump(cfg)
    for override in ("sigma='0.1'", "population_size='8'", "export=1", "model=3"):  # no strings → numbers, no bools
        with pytest.raises(ConfigError, match="^config key"):
            load_config(overrides=[override])


def test_low_rank_noise_takes_its_rank_and_the_default_dict_has_none():
    from zoopt.noise import LowRank, noise_from_dict

    assert "rank" not in default_config("train")["noise"]
    for overrides in (["noise.kind=low_rank", "noise.rank=4"], ["noise={kind: low_rank, rank: 4}"]):
        cfg = load_config(overrides=overrides)
        assert cfg["noise"] == {"kind": "low_rank", "include": ["*"], "exclude": [], "correlated": False, "rank": 4}
        assert noise_from_dict(cfg["noise"]) == LowRank(rank=4)
    assert "rank" not in load_config(overrides=["noise.rank=null"])["noise"]


def test_noise_stream_is_unset_by_default_and_chooses_the_stream():
    from zoopt.hparams.run_configs import NOISE_STREAMS
    from zoopt.noise import STREAMS, Gaussian, noise_from_dict

    assert NOISE_STREAMS == STREAMS
    assert "stream" not in default_config("train")["noise"]
    assert noise_from_dict(load_config()["noise"]) == Gaussian(stream="counter")  # unset: the new default
    cfg = load_config(overrides=["noise.stream=numpy"])
    assert cfg["noise"]["stream"] == "numpy" and noise_from_dict(cfg["noise"]) == Gaussian(stream="numpy")
    with pytest.raises(ConfigError, match="^config key 'noise.stream' must be one of counter, numpy"):
        load_config(overrides=["noise.stream=philox"])


# -- the dataclasses in Python ----------------------------------------------------------------
def test_dataclasses_validate_on_construction_and_are_frozen():
    assert GRPOConfig(lr=1e-5).lr == 1e-5 and TrainConfig(sigma=1).sigma == 1.0
    with pytest.raises(ConfigError, match="^config key 'lr' must be a number > 0, got -1$"):
        GRPOConfig(lr=-1)
    with pytest.raises(ConfigError, match="^config key 'noise.kind' must be a registered noise"):
        TrainConfig(noise=NoiseConfig(kind="banana"))
    with pytest.raises(ConfigError, match="^config key 'noise.kind'"):
        TrainConfig(noise={"kind": "banana"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().sigma = 0.1
    cfg = TrainConfig(noise={"kind": "rademacher"})
    assert cfg.noise == NoiseConfig(kind="rademacher") and from_dict(TrainConfig, to_dict(cfg)) == cfg
    assert validate(to_dict(cfg), "train") == to_dict(cfg)


def test_grpo_choices_are_the_loss_and_advantage_modules():
    from zoopt.grpo import LOSS_TYPES, SCALE_REWARDS

    rules = {f.name: f.metadata.get("rule") for f in dataclasses.fields(GRPOConfig)}
    assert rules["loss_type"].choices == LOSS_TYPES and rules["scale_rewards"].choices == SCALE_REWARDS


def test_grpo_takes_its_hyper_parameters_from_grpo_config():
    from zoopt.grpo import GRPO

    sampling = Sampling(temperature=1.0, n=2)
    with pytest.raises(ConfigError, match="^config key 'lr' must be a number > 0, got 0$"):
        GRPO(None, None, sampling, lr=0)  # checked before the engine is touched
    with pytest.raises(ConfigError, match="^config key 'loss_type' must be one of"):
        GRPO(None, None, sampling, loss_type="ppo")
    with pytest.raises(TypeError, match="unexpected keyword argument 'sigma'"):
        GRPO(None, None, sampling, sigma=0.1)
    assert set(GRPOConfig.TRAINER_KEYS) <= {f.name for f in dataclasses.fields(GRPOConfig)}
    assert GRPOConfig().trainer_kwargs()["lr"] == 1e-6


def test_build_es_checks_a_dict_that_did_not_come_through_load_config():
    """Schedules and sweeps build train dicts with ``merge``: the ES shell still gets checked values."""
    from zoopt.noise import LowRank
    from zoopt.workflows.builders import build_es

    with pytest.raises(ConfigError, match="^config key 'sigma' must be a number > 0, got 'abc'$"):
        build_es({**default_config("train"), "sigma": "abc"})
    es = build_es({**default_config("train"), "sigma": "5e-2", "noise": {"kind": "low_rank", "rank": 2}})
    assert es.sigma == 0.05 and es.lr == 2.5e-3 and es.population_size == 16 and es.noise == LowRank(rank=2)


def test_noise_rank_is_a_key_on_every_path_that_sets_keys(tmp_path):
    """``noise.rank`` (LowRank(rank=r), docs/concepts.md) is absent from the defaults but settable
    by --set, by compare's es./schedules' overrides and by a sweep space."""
    import sweeps
    from sweeps.spec import packaged_spec
    from zoopt.runs.seedlog import SeedLog
    from zoopt.cli import main
    from zoopt.workflows.schedule import phase_config

    run = tmp_path / "run"
    assert main(["train", "--model", "tiny", "--set", "noise.kind=low_rank", "--set", "noise.rank=2",
                 "--set", "steps=1", "--set", "population_size=2", "--set", "prompts_per_step=2",
                 "--set", "eval.n_problems=0", "--set", "export=false", "--set", f"run_dir={run}", "--quiet"]) == 0
    assert SeedLog.load(run).header["noise"]["rank"] == 2
    for overrides in ({"noise.kind": "low_rank", "noise.rank": 3}, {"noise": {"kind": "low_rank", "rank": 3}}):
        assert phase_config("es", {}, ("es", overrides))["noise"]["rank"] == 3
    raw = yaml.safe_load(packaged_spec("tiny").read_text())
    raw.update(set={"noise.kind": "low_rank"}, space={"noise.rank": {"type": "int", "low": 1, "high": 4}})
    assert sweeps.load_spec(raw).trial_config({"noise.rank": 4}, None)["noise"]["rank"] == 4
    with pytest.raises(ConfigError, match="unknown config key 'noise.rang'"):
        phase_config("es", {}, ("es", {"noise.rang": 2}))
