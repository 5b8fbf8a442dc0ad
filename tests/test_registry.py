"""The generic registry: lazy targets, collisions, suggestions, entry points."""

import pytest

from zoopt.registry import ESTIMATORS, NOISE, Registry, RegistryError, build


def test_lazy_target_is_imported_on_first_get():
    reg = Registry("thing")
    reg.register("od", "collections:OrderedDict")
    assert reg._targets["od"] == "collections:OrderedDict"
    from collections import OrderedDict

    assert reg.get("od") is OrderedDict


def test_decorator_and_collision():
    reg = Registry("thing")

    @reg.register("a")
    def a():
        return 1

    reg.register("a", a)  # same target again is fine
    with pytest.raises(RegistryError, match="'a' is already registered"):
        reg.register("a", lambda: 2)
    reg.register("a", "math:sqrt", overwrite=True)
    import math

    assert reg.get("a") is math.sqrt


def test_unknown_name_suggests_and_lists():
    with pytest.raises(RegistryError, match="unknown estimator 'two_pont'; did you mean 'two_point'"):
        ESTIMATORS.get("two_pont")
    with pytest.raises(RegistryError, match="known: "):
        NOISE.get("zzz")


def test_build_names_bad_keyword():
    with pytest.raises(RegistryError, match="noise 'low_rank'.*rnak"):
        build(NOISE, "low_rank", rnak=2)


def test_entry_points_are_loaded_lazily(monkeypatch):
    from importlib.metadata import EntryPoint

    import zoopt.registry as registry_mod

    eps = [EntryPoint("mine", "collections:Counter", "zoopt.test_group")]
    monkeypatch.setattr(registry_mod, "entry_points", lambda group: [e for e in eps if e.group == group])
    reg = Registry("thing", "zoopt.test_group")
    from collections import Counter

    assert reg.get("mine") is Counter and "mine" in reg.names()


def test_core_does_not_import_plugin_packages():
    import subprocess
    import sys

    code = "import sys, zoopt, zoopt.engines; print(sorted(m for m in ('estimators','objectives','sweeps','transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
