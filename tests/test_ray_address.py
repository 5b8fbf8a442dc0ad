"""``--ray-address auto`` with no cluster is one line, exit status 2 (docs/ray.md's existing-cluster
line), not a traceback.  Ray's own "no running instance" error is simulated: on a shared machine
``auto`` would attach to any cluster another process runs, and no test may do that."""

import pytest

from zoopt.cli import main

ray = pytest.importorskip("ray")

RAY_SAYS = ("Could not find any running Ray instance. Please specify the one to connect to by setting `--address` "
            "flag or `RAY_ADDRESS` environment variable.")


@pytest.fixture
def no_cluster(monkeypatch):
    def init(*args, **kwargs):
        assert kwargs.get("address") == "auto"  # never a local start in this test
        raise ConnectionError(RAY_SAYS)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)


def test_connect_says_it_in_one_line(no_cluster):
    from zoopt.engines.ray.cluster import NoRayCluster, connect

    with pytest.raises(NoRayCluster) as err:
        connect("auto")
    assert str(err.value) == f"no Ray cluster at 'auto' (start one with `ray start --head`): {RAY_SAYS}"
    assert isinstance(err.value, ConnectionError) and isinstance(err.value, ValueError)


def test_zoopt_train_with_ray_address_auto_and_no_cluster(no_cluster, tmp_path, capsys):
    argv = ["train", "--engine", "ray", "--ray-address", "auto", "--model", "tiny", "--set", "dtype=float32",
            "--set", "engine_args.replicas=2", "--set", f"run_dir={tmp_path / 'run'}", "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [f"zoopt train: error: no Ray cluster at 'auto' (start one with `ray start --head`): "
                                f"{RAY_SAYS} (zoopt --debug train ... shows the traceback)"]
