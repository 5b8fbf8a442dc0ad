"""One call in its own Python process, so that its peak memory is its own.

The parent (:func:`run_isolated`) writes the call's JSON spec to ``DIR/spec.json`` and starts
``python -m MODULE --worker DIR/spec.json DIR/result.json`` through a minimal launcher process
(:data:`LAUNCHER`), with the child's output in ``DIR/worker.log``.  ``MODULE``'s ``__main__``
hands its function to :func:`worker_main`, which runs it on the spec and writes the JSON result
with the child's own peak resident memory (``peak_rss_mib_self``: ``VmHWM`` of
``/proc/self/status``; ``ru_maxrss_mib_self``: its ``getrusage``).  The parent adds the peak the
launcher read from the child's ``rusage`` (``os.wait4``; ``peak_rss_mib``) and the process's
wall time (``process_wall_s``).  A child that fails is a ``RuntimeError`` with the last line of
its log.  Memory is in MiB (``ru_maxrss`` is in kB on Linux).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

# Runs the worker and records its rusage.  A separate, minimal process (python -c, ~10 MiB)
# because on Linux a child's ru_maxrss starts from the high-water RSS of the memory it
# exec'ed from (fs/exec.c: exec_mmap keeps the old mm's hiwater), and with vfork/posix_spawn
# that is the spawning process's: spawned from a 560 MiB pytest process, a 486 MiB worker
# reported 558 MiB.
LAUNCHER = """import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as fh:
    json.dump({"exit": os.waitstatus_to_exitcode(status), "ru_maxrss_kib": usage.ru_maxrss}, fh)
"""


def vm_hwm_mib() -> float | None:
    """This process's peak resident memory (``VmHWM``), or ``None`` where ``/proc`` has none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def worker_main(run: Callable[[dict], dict], spec_path: str, out_path: str) -> int:
    """The child's side: ``run(spec)`` with its own peak memory added, written to ``out_path``."""
    spec = json.loads(Path(spec_path).read_text())
    result = run(spec)
    result["peak_rss_mib_self"] = vm_hwm_mib()
    result["ru_maxrss_mib_self"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    Path(out_path).write_text(json.dumps(result, indent=2))
    return 0


def run_isolated(module: str, spec: dict, method_dir: Path) -> dict:
    """Run ``spec`` in ``python -m module --worker``; add the child's rusage peak RSS (module docstring)."""
    method_dir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path, usage_path = method_dir / "spec.json", method_dir / "result.json", method_dir / "rusage.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    t0 = time.perf_counter()
    with open(method_dir / "worker.log", "w") as log:
        subprocess.run([sys.executable, "-c", LAUNCHER, str(usage_path), sys.executable, "-m", module,
                        "--worker", str(spec_path), str(out_path)], stdout=log, stderr=subprocess.STDOUT)
    usage = json.loads(usage_path.read_text()) if usage_path.exists() else {"exit": None}
    if usage["exit"] != 0 or not out_path.exists():
        tail = (method_dir / "worker.log").read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"method {spec['name']!r} failed (exit {usage['exit']}): {tail[0]}; see {method_dir}/worker.log")
    result = json.loads(out_path.read_text())
    result["peak_rss_mib"] = usage["ru_maxrss_kib"] / 1024  # kB on Linux, measured by the launcher
    result["process_wall_s"] = round(time.perf_counter() - t0, 3)
    return result
