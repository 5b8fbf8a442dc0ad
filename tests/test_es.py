"""The ES shell: ask/tell, learning rate, state round trip, bad input."""

import numpy as np
import pytest

from estimators import OnePoint, TwoPoint, raw
from zoopt import ES, LowRank
from zoopt.hparams import ConfigError, TrainConfig
from zoopt.registry import RegistryError


def test_ask_is_stable_within_a_step_and_tell_advances():
    es = ES(population_size=4, sigma=0.1, lr=0.5, seed=3)
    p0 = es.ask()
    assert es.ask() is p0 and len(p0) == 4 and p0.sigma == 0.1
    update = es.tell([1.0, 2.0, 3.0, 4.0])
    assert es.step == 1 and es.ask().step == 1 and es.ask() != p0
    assert update.seeds == tuple(m.seed for m in p0.members)


def test_tell_multiplies_estimator_output_by_lr():
    es = ES(OnePoint(raw), population_size=3, sigma=0.1, lr=0.5)
    pop = es.ask()
    expected = OnePoint(raw).update(pop, [1.0, 2.0, 4.0]).coefficients
    np.testing.assert_allclose(es.tell([1.0, 2.0, 4.0]).coefficients, 0.5 * np.array(expected))


def test_state_dict_round_trip_resumes_identically():
    a = ES("two_point", noise=LowRank(rank=2, exclude=("*norm*",)), population_size=6, sigma=0.2, lr=0.1, seed=9)
    for _ in range(3):
        a.tell(np.arange(6.0))
    b = ES("two_point", population_size=2)  # the estimator object comes from the constructor
    b.load_state_dict(a.state_dict())
    assert b.noise == a.noise and b.ask() == a.ask() and b.step == 3


def test_estimator_by_name_and_unknown_name_suggests():
    assert isinstance(ES("two_point", population_size=4).estimator, TwoPoint)
    with pytest.raises(RegistryError, match="did you mean 'one_point'"):
        ES("one_pont")


@pytest.mark.parametrize("kwargs,match", [
    ({"population_size": 1}, "population_size"),
    ({"sigma": 0.0}, "sigma"),
    ({"sigma": -1e-3}, "sigma"),
    ({"lr": float("nan")}, "lr"),
    ({"seed": -1}, "seed"),
    ({"estimator": "two_point", "population_size": 5}, "even"),
])
def test_bad_hyperparameters_are_one_line_errors(kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        ES(**kwargs)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("key,value", [("sigma", 0.0), ("sigma", float("inf")), ("sigma", "abc"), ("lr", float("nan")),
                                       ("lr", -1), ("population_size", 1), ("population_size", 2.5), ("seed", -1),
                                       ("seed", True)])
def test_a_bad_value_is_its_config_keys_error(key, value):
    """One definition per key: ES(sigma=…) fails with the very line `--set sigma=…` gives."""
    with pytest.raises(ConfigError) as from_config:
        TrainConfig(**{key: value})
    with pytest.raises(ConfigError) as from_es:
        ES(**{key: value})
    assert str(from_es.value) == str(from_config.value) and f"config key {key!r}" in str(from_es.value)


def test_es_defaults_are_the_papers_and_train_defaults_the_demos():
    """The two sets differ on purpose, and both docstrings say so quoting the values: pinned here,
    so neither the values nor the text can change alone."""
    es, train = ES(), TrainConfig()
    assert (es.sigma, es.lr, es.population_size) == (1.5e-3, 2.5e-4, 32)       # the paper's, 1.5 B models
    assert (train.sigma, train.lr, train.population_size) == (5e-3, 2.5e-3, 16)  # measured, the 135 M demo
    for doc in (ES.__doc__, TrainConfig.__doc__):
        assert "σ=1.5e-3, α=2.5e-4, N=32" in doc and "σ=5e-3, α=2.5e-3, N=16" in doc
        assert "paper's recipe for 1.5 B models" in doc and "135 M demo" in doc
