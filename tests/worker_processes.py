"""Which deadline-pool worker processes exist: read from /proc (no psutil)."""

import os
from pathlib import Path


def worker_pids() -> set[int]:
    """Pids of this process's live children running ``zoopt/deadline/worker.py``."""
    me, found = os.getpid(), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == me and b"deadline/worker.py" in cmdline:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def zombie_children() -> set[int]:
    """This process's children that exited and were never reaped."""
    me, found = os.getpid(), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] == "Z":
            found.add(int(stat.parent.name))
    return found
