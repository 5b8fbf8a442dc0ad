"""objectives.get / register / load: built-ins, "did you mean", files, reward functions."""

import subprocess
import sys
import textwrap

import pytest

import objectives
from objectives import FunctionObjective
from objectives.arithmetic import Arithmetic
from zoopt.objective import Objective
from zoopt.registry import OBJECTIVES, RegistryError


def test_builtins_are_registered_and_built_with_kwargs():
    assert {"arithmetic", "countdown", "gsm8k"} <= set(objectives.names())
    objective = objectives.get("arithmetic", digits=3, seed=2)
    assert isinstance(objective, Arithmetic) and objective.digits == 3 and objective.seed == 2
    assert type(objectives.get("countdown")).__name__ == "Countdown"
    assert objectives.load("gsm8k").name == "gsm8k"


def test_unknown_name_suggests_the_closest():
    with pytest.raises(RegistryError, match="did you mean 'arithmetic'"):
        objectives.get("arithmatic")


def test_bad_keyword_is_a_one_line_error_naming_the_objective():
    with pytest.raises(RegistryError, match="objective 'arithmetic'.*digitz") as info:
        objectives.get("arithmetic", digitz=3)
    assert "\n" not in str(info.value)


def test_get_works_after_a_bare_import_and_the_core_never_imports_objectives():
    code = ("import sys, zoopt.objective; print('objectives' in sys.modules); "
            "import objectives; print(type(objectives.get('arithmetic')).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "Arithmetic"], out.stderr


def test_duplicate_name_with_a_different_target_raises():
    with pytest.raises(RegistryError, match="'arithmetic' is already registered"):
        objectives.register("arithmetic")(type("Other", (Objective,), {}))
    # registering the same target again is not a conflict
    objectives.register("arithmetic")(Arithmetic)
    assert OBJECTIVES.get("arithmetic") is Arithmetic


def test_register_decorator_adds_a_name():
    @objectives.register("test_constant_reward")
    class Constant(Objective):
        name = "constant"

        def reward(self, prompt, completion, **row):
            return 0.25

    try:
        objective = objectives.get("test_constant_reward")
        assert objective(["p", "q"], ["a", "b"]) == [0.25, 0.25]
    finally:
        OBJECTIVES._targets.pop("test_constant_reward")


def _write(tmp_path, body):
    path = tmp_path / "my_reward.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_load_a_plain_reward_function_from_a_file(tmp_path):
    path = _write(tmp_path, """
        def shorter_is_better(prompts, completions, answer, **kwargs):
            return [1.0 if c.strip() == a else 0.5 for c, a in zip(completions, answer)]
    """)
    objective = objectives.load(f"{path}:shorter_is_better", dataset="arithmetic", seed=4)
    assert isinstance(objective, FunctionObjective) and objective.name == "shorter_is_better"
    data = objective.dataset("train", 3)
    assert data.to_dict() == Arithmetic(seed=4).dataset("train", 3).to_dict()
    answers = data["answer"]
    assert objective(data["prompt"], [answers[0], "x", answers[2]], answer=answers) == [1.0, 0.5, 1.0]
    assert objective.extract_answer("so 12") == "12"
    assert objective.is_correct([1.0, 0.5]) == [True, False]


def test_load_a_subclass_an_instance_and_a_factory(tmp_path):
    path = _write(tmp_path, """
        from objectives.arithmetic import Arithmetic

        class Mine(Arithmetic):
            name = "mine"

        instance = Mine(seed=9)

        def factory(seed=0):
            return Mine(seed=seed + 1)

        not_an_objective = 42
    """)
    assert objectives.load(f"{path}:Mine", digits=1).digits == 1
    assert objectives.load(f"{path}:instance").seed == 9
    assert objectives.load(f"{path}:factory", seed=5).seed == 6
    assert objectives.load("objectives.arithmetic:Arithmetic", seed=3).seed == 3
    with pytest.raises(RegistryError, match="is a int, not an Objective"):
        objectives.load(f"{path}:not_an_objective")
    with pytest.raises(RegistryError, match="instance.*takes no arguments"):
        objectives.load(f"{path}:instance", seed=1)


def test_bad_paths_and_attributes_are_one_line_errors(tmp_path):
    path = _write(tmp_path, "x = 1\n")
    with pytest.raises(RegistryError, match="has no attribute 'missing'"):
        objectives.load(f"{path}:missing")
    with pytest.raises(RegistryError, match="does not exist"):
        objectives.load(f"{tmp_path}/nope.py:fn")
    with pytest.raises(RegistryError, match="cannot import module 'no_such_module_xyz'"):
        objectives.load("no_such_module_xyz:fn")
    with pytest.raises(RegistryError, match="module 'objectives.arithmetic' has no attribute 'Nope'"):
        objectives.load("objectives.arithmetic:Nope")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RegistryError, match="importing .*broken.py.* failed: RuntimeError: boom"):
        objectives.load(f"{broken}:fn")
