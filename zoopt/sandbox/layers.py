"""The sandbox's isolation layers, used by ``boot.py`` in the child (stdlib only).

Namespaces (``unshare``), the visible-file-system fallback (fresh ``/proc``, tmpfs scratch
space, the standard library bound back where a tmpfs hides it, everything else remounted
read-only; the allowlist view that replaces it is ``file_view.py``), the seccomp filter
(pyseccomp over the system's libseccomp) and the resource limits.  See docs/sandbox.md.
"""

import ctypes
import errno
import os
import re
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 4096, 0x4000, 1 << 18, 1 << 21
ST_NOSUID, ST_NODEV, ST_NOEXEC, ST_NOATIME, ST_NODIRATIME, ST_RELATIME = 2, 4, 8, 1024, 2048, 4096
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
SOCKET_TYPES_DENIED = (2, 3, 4, 5, 10)  # all but SOCK_STREAM: DGRAM, RAW, RDM, SEQPACKET, PACKET

# Kernel attack surface a Python test never needs (EPERM); docker's default profile is wider.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root",
    "chroot", "unshare", "setns", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
    "request_key", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "iopl",
    "ioperm", "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
    "name_to_handle_at", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount",
    "mount_setattr", "kcmp", "pidfd_getfd", "lookup_dcookie", "vhangup",
)
# Without a mount namespace the unprivileged uid may not reach the interpreter's standard
# library (a Python under /root): these are imported before the uid changes.
PRELOAD = ("abc", "bisect", "collections", "copy", "dataclasses", "decimal", "enum", "fractions",
           "functools", "hashlib", "heapq", "itertools", "json", "math", "operator", "random",
           "re", "statistics", "string", "typing", "unittest")
NAMESPACE_FLAGS = (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                   CLONE_NEWNET, 0x02000000, 0x00000080)  # + CLONE_NEWCGROUP, CLONE_NEWTIME

libc = ctypes.CDLL(None, use_errno=True)
for _name in ("unshare", "prctl", "mount"):
    getattr(libc, _name).restype = ctypes.c_int
libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                       ctypes.c_char_p)


def check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    check(libc.unshare(flags), "unshare")


def mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def build_filter(cfg: dict):
    """The compiled (not yet loaded) seccomp filter, or None with the reason in ``notes``."""
    path = cfg.get("pyseccomp")
    if not path:
        return None
    import ctypes.util
    import importlib.util

    known = {"seccomp": cfg.get("libseccomp"), "c": cfg.get("libc")}
    original = ctypes.util.find_library
    ctypes.util.find_library = lambda name: known.get(name) or original(name)  # no ldconfig run
    try:
        spec = importlib.util.spec_from_file_location("pyseccomp", path)
        seccomp = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(seccomp)
    finally:
        ctypes.util.find_library = original
    f = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED_SYSCALLS + (() if cfg["allow_exec"] else ("execve", "execveat")):
        try:
            f.add_rule(seccomp.ERRNO(1), name)
        except (OSError, ValueError, RuntimeError):
            pass  # a syscall this libseccomp or architecture does not know
    f.add_rule(seccomp.ERRNO(38), "clone3")  # ENOSYS: its flags cannot be inspected; libc falls back
    for flag in NAMESPACE_FLAGS:
        f.add_rule(seccomp.ERRNO(1), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # No socket() at all: the network namespace already has no route out, and a Unix socket
    # could connect to a socket file on the host (the read-only mount does not stop connect()).
    # A stream socketpair() (multiprocessing.Pipe, asyncio's self-pipe) reaches nothing else.
    f.add_rule(seccomp.ERRNO(1), "socket")
    for kind in SOCKET_TYPES_DENIED:
        f.add_rule(seccomp.ERRNO(1), "socketpair", seccomp.Arg(1, seccomp.MASKED_EQ, 0xF, kind))
    return f


def enter_namespaces(cfg: dict, info: dict) -> None:
    """unshare() as much as the kernel allows; record what worked in ``info``."""
    if not cfg["namespaces"]:
        return
    uid, gid = os.getuid(), os.getgid()
    wanted = CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS
    if uid == 0:
        attempts = [wanted, CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWNS, CLONE_NEWPID | CLONE_NEWNS]
    else:
        attempts = [CLONE_NEWUSER | wanted]
    for flags in attempts:
        try:
            unshare(flags)
        except OSError as exc:
            info["notes"].append(f"unshare({flags:#x}) failed: {exc.strerror}")
            continue
        if flags & CLONE_NEWUSER:  # map ourselves to root of the new user namespace
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"0 {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"0 {gid} 1")
            info["user_namespace"] = True
        info["pid_namespace"] = bool(flags & CLONE_NEWPID)
        info["network_isolated"] = bool(flags & CLONE_NEWNET)
        info["mount_namespace"] = bool(flags & CLONE_NEWNS)
        break
    if uid == 0 and not info["network_isolated"]:
        try:
            unshare(CLONE_NEWNET)
            info["network_isolated"] = True
        except OSError as exc:
            info["notes"].append(f"unshare(CLONE_NEWNET) failed: {exc.strerror}")


def _hidden_ancestor(path: str) -> str | None:
    """The topmost ancestor of ``path`` that others may not traverse (``/root`` is 0700)."""
    parts = os.path.abspath(path).split(os.sep)[1:]
    for i in range(1, len(parts)):
        ancestor = os.sep + os.path.join(*parts[:i])
        if not os.stat(ancestor).st_mode & 0o001:
            return ancestor
    return None


def visible_filesystem(cfg: dict, info: dict) -> None:
    """In I, where the allowlist view is not built (``filesystem="visible"``, or it failed): the
    machine's file system stays visible, read-only — a fresh /proc, tmpfs scratch space, the
    interpreter's standard library reachable by the unprivileged uid, every other mount point
    remounted read-only."""
    # the stdlib directories, kept open: tmpfs below may hide them, and they are bound back
    keep = {d: os.open(d, os.O_PATH | os.O_DIRECTORY) for d in sys.path if os.path.isdir(d)}
    if info["pid_namespace"]:
        try:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            info["private_proc"] = True
        except OSError as exc:
            info["notes"].append(str(exc))
    scratch = [d for d in ("/tmp", "/var/tmp", "/dev/shm", "/run")
               if os.path.isdir(d) and not os.path.islink(d)]
    hidden = {a for a in map(_hidden_ancestor, keep) if a} if info["uid"] is not None else set()
    for target in scratch + sorted(hidden - set(scratch)):
        size = f"size={int(cfg['disk_mb'])}m" if target in scratch else "size=1m"
        try:
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV,
                  f"{size},mode={'1777' if target in scratch else '0755'}")
        except OSError as exc:
            info["notes"].append(str(exc))
    old_umask = os.umask(0o022)
    for directory, fd in keep.items():  # bind back what a tmpfs now hides
        try:
            here = os.stat(directory)
            there = os.fstat(fd)
            if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
                continue
        except OSError:
            pass
        try:
            os.makedirs(directory, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", directory, None, MS_BIND | MS_REC)
            mount(None, directory, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        except OSError as exc:
            info["notes"].append(f"binding {directory}: {exc}")
    os.umask(old_umask)
    for fd in keep.values():
        os.close(fd)
    read_only_elsewhere(scratch, info)


def working_directory(program: bytes, info: dict, fallback: str) -> str:
    """``/tmp/work`` on the private tmpfs, holding ``program.py``; ``fallback`` (the parent's
    temporary directory) where there is no private /tmp."""
    workdir = "/tmp/work"
    try:
        os.mkdir(workdir, 0o700)
    except OSError as exc:  # no private /tmp after all: stay in the parent's directory
        info["notes"].append(f"private working directory: {exc}")
        return fallback
    info["private_tmp"] = True
    with open(os.path.join(workdir, "program.py"), "wb") as f:
        f.write(program)
    return workdir


def read_only_elsewhere(writable: list[str], info: dict) -> None:
    """Remount every mount point but the ``writable`` scratch tmpfs read-only (in this mount
    namespace only): a world-writable directory elsewhere (``/var/crash``, a cache) is not
    writable by the program.  Device files stay writable on a read-only mount (``/dev/null``)."""
    with open("/proc/self/mountinfo") as f:
        points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
                  for line in f]
    keep = ST_NOSUID | ST_NODEV | ST_NOEXEC | ST_NOATIME | ST_NODIRATIME
    for point in points:
        if point in writable or any(point.startswith(w + "/") for w in writable):
            continue
        try:
            flags = os.statvfs(point).f_flag
            extra = (flags & keep) | (MS_RELATIME if flags & ST_RELATIME else 0)
            mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | extra)
        except OSError as exc:
            if point == "/" or exc.errno not in (errno.ENOENT, errno.EACCES):
                info["notes"].append(f"read-only {point}: {exc.strerror}")
            continue
        if point == "/":
            info["read_only_root"] = True


def set_limits(cfg: dict) -> None:
    import resource

    cpu = int(cfg["cpu_s"])
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_FSIZE: (cfg["file_mb"] << 20,) * 2,
        resource.RLIMIT_NOFILE: (cfg["max_open_files"],) * 2,
        resource.RLIMIT_NPROC: (cfg["max_processes"],) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    if cfg["memory_mb"]:
        limits[resource.RLIMIT_AS] = (cfg["memory_mb"] << 20,) * 2
    for which, value in limits.items():
        resource.setrlimit(which, value)
