"""The sandbox's file-system view: a new root that holds only the allowlist (stdlib only).

Built by I (``boot.py``), pid 1 of the sandbox's namespaces, in its private mount namespace,
before the program starts; the allowlist comes from the parent (``runtime_files.py``):

1. a small tmpfs over the run's own temporary directory becomes the new root;
2. bound into it, read-only, at the paths the interpreter expects: the standard library
   (its ``site-packages`` covered by an empty tmpfs), each shared library the interpreter
   loads, the interpreter binary, the packages an objective named; ``/dev/null``, ``zero``,
   ``random`` and ``urandom`` and the ``/dev/fd``, ``stdin``/``stdout``/``stderr`` links.
   Size-limited tmpfs at ``/tmp`` — the working directory, ``/tmp/work`` — and ``/dev/shm``,
   ``multiprocessing``'s semaphores, are mounted before the binds, so that an allowlisted path
   below ``/tmp``, a checkout's virtual environment there, is bound on top of them;
3. the whole tree made read-only and ``nosuid`` in one ``mount_setattr(AT_RECURSIVE)``, and
   the two scratch tmpfs writable again (a remount per mount point where the kernel is older
   than 5.12);
4. a fresh ``/proc`` (only the sandbox's processes are in it);
5. ``pivot_root`` into it and the old root detached: nothing of the machine's file system is
   reachable any more, by any path, from any process started after this.

:func:`build` raises OSError when a step fails; the caller undoes it (:func:`undo`) and records
that the file system stayed visible.
"""

import ctypes
import os

from layers import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, MS_REMOUNT, check, libc, mount

MNT_DETACH, AT_FDCWD, AT_RECURSIVE = 2, -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
SYS_MOUNT_SETATTR = 442  # the same on every architecture (new syscalls share one table)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
DEVICES = ("null", "zero", "random", "urandom")
LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
         "stderr": "/proc/self/fd/2"}
ROOT_DIRS = ("dev", "dev/shm", "proc", "tmp")
SCRATCH = ("tmp", "dev/shm")  # writable tmpfs of disk_mb each

libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _inside(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _bind_file(root: str, path: str, mounted: list) -> None:
    target = _inside(root, path)
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o444))
    mount(path, target, None, MS_BIND)
    mounted.append(target)


def _bind_dir(root: str, path: str, mounted: list) -> None:
    target = _inside(root, path)
    os.makedirs(target, mode=0o755, exist_ok=True)
    mount(path, target, None, MS_BIND)  # not MS_REC: a mount below it stays out
    mounted.append(target)


def _mount_setattr(path: str, flags: int, attr: MountAttr) -> bool:
    return libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr),
                        ctypes.sizeof(attr)) == 0


def _read_only(root: str, mounted: list, scratch: list) -> None:
    """Every mount of the new tree read-only and nosuid but the ``scratch`` tmpfs themselves
    (what is bound below them stays read-only): one recursive call and one per scratch
    directory, or one remount per mount point where the kernel has no ``mount_setattr``."""
    if _mount_setattr(root, AT_RECURSIVE, MountAttr(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0)):
        for target in scratch:
            if not _mount_setattr(target, 0, MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)):
                check(-1, f"mount_setattr {target}")  # raises with errno's reason
        return
    for target in [root] + mounted:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID)


def build(root: str, view: dict, disk_mb: int, private_proc: bool) -> None:
    """Make ``root`` (an existing, empty-able directory) the new root holding only ``view``
    (``runtime_files.runtime_view``), then ``pivot_root`` into it; the working directory is
    ``/tmp`` afterwards.  See the module docstring."""
    syscall_pivot = SYS_PIVOT_ROOT.get(os.uname().machine)
    if syscall_pivot is None:
        raise OSError(0, f"pivot_root: unknown architecture {os.uname().machine}")
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    old_umask = os.umask(0o022)
    mounted: list[str] = []
    scratch = [_inside(root, name) for name in SCRATCH]
    try:
        for name in ROOT_DIRS:
            os.mkdir(_inside(root, name), 0o755)
        for target in scratch:  # first: a bound path below /tmp (a venv there) goes on top
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV,
                  f"size={int(disk_mb)}m,mode=1777")
        for directory in view["dirs"] + view["packages"]:
            (_bind_dir if os.path.isdir(directory) else _bind_file)(root, directory, mounted)
        for directory in view["hide"]:
            mount("tmpfs", _inside(root, directory), "tmpfs", MS_NOSUID | MS_NODEV,
                  "size=4k,mode=0555")
            mounted.append(_inside(root, directory))
        for path in view["files"]:
            _bind_file(root, path, mounted)
        for name in DEVICES:
            _bind_file(root, f"/dev/{name}", mounted)
        for name, target in LINKS.items():
            os.symlink(target, _inside(root, f"dev/{name}"))
    finally:
        os.umask(old_umask)
    _read_only(root, mounted, scratch)
    if private_proc:
        mount("proc", _inside(root, "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(root)
    check(libc.syscall(syscall_pivot, b".", b"."), "pivot_root")
    check(libc.umount2(b".", MNT_DETACH), "detaching the old root")
    os.chdir("/tmp")


def undo(root: str) -> None:
    """Detach whatever :func:`build` mounted at ``root`` before it failed."""
    libc.umount2(root.encode(), MNT_DETACH)

