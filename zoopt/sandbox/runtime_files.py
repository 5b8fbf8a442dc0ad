"""What a sandboxed program may read: the allowlist of the sandbox's file-system view.

The view (built by ``file_view.py`` in the child) holds only what the interpreter needs to run
a program, found here once per parent process and per set of packages:

* ``dirs`` — the interpreter's standard library: the directories on ``sys.path`` of
  ``python -I -S`` (``lib/python3.X`` and its ``lib-dynload``), bound read-only;
* ``hide`` — the ``site-packages``/``dist-packages`` directories inside those, covered by an
  empty read-only tmpfs: no installed package, dataset or answer key is reachable through the
  standard library's folder;
* ``files`` — the shared libraries the interpreter and its extension modules load (libc,
  libm, libz, libssl, libffi, …), each at the path the dynamic loader opened it, found by
  importing every ``lib-dynload`` module in a probe interpreter and listing its loaded objects
  (``dl_iterate_phdr``); plus the interpreter binary itself (its real path: the program's
  ``sys.executable`` names it there, not a virtual environment's link);
* ``packages`` — only when an objective names third-party packages (``packages=("numpy",)``):
  each package's directory (and its wheel's vendored ``<name>.libs``), bound read-only, with
  ``sys_path`` the folders the program's ``sys.path`` gets so that it can import them — and the
  shared libraries those packages load at import time join ``files``.  A library a package
  opens only later, or a package it imports that was not named, is not there: name every
  package the programs import.

Nothing else: no ``/etc``, no home directory, no project checkout, no site-packages, no dataset
or Hugging Face cache.  :func:`runtime_view` is cached; running this file is the probe.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
import json
import os
import subprocess
import sys

PACKAGE_DIRS = ("site-packages", "dist-packages")


def _loaded_objects() -> list[str]:
    """The paths of the shared objects loaded in this process, as the loader opened them."""

    class Info(ctypes.Structure):  # the head of struct dl_phdr_info
        _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]

    names: list[str] = []
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Info), ctypes.c_size_t,
                                     ctypes.c_void_p)

    def record(info, size, data):  # noqa: ARG001
        if info.contents.name:
            names.append(os.fsdecode(info.contents.name))
        return 0

    ctypes.CDLL(None).dl_iterate_phdr(callback_type(record), None)
    return names


def _probe(packages: list[str], sys_path: list[str]) -> None:
    """In ``python -I -S``: import every extension module of the standard library and the named
    packages, then print the shared objects loaded (one JSON list)."""
    for directory in list(sys.path):
        if os.path.basename(directory) == "lib-dynload" and os.path.isdir(directory):
            for entry in sorted(os.listdir(directory)):
                if entry.endswith(".so"):
                    try:
                        importlib.import_module(entry.split(".")[0])
                    except Exception:  # noqa: BLE001 - a module whose library is not installed
                        pass
    sys.path.extend(sys_path)
    for name in packages:
        importlib.import_module(name)
    print(json.dumps(_loaded_objects()))


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _package_dirs(name: str) -> tuple[str, list[str]]:
    """(the folder that holds package ``name``, the paths to bind for it) in this interpreter."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None and not spec.submodule_search_locations:
        raise ValueError(f"packages: {name!r} is not installed where zoopt runs")
    location = (list(spec.submodule_search_locations)[0] if spec.submodule_search_locations
                else spec.origin)
    folder = os.path.dirname(os.path.realpath(location))
    paths = [os.path.realpath(location)]
    vendored = os.path.join(folder, f"{name}.libs")  # auditwheel's vendored shared libraries
    if os.path.isdir(vendored):
        paths.append(vendored)
    return folder, paths


@functools.lru_cache(maxsize=16)
def runtime_view(packages: tuple[str, ...] = ()) -> dict:
    """The allowlist for programs of this interpreter that import ``packages`` (see the module
    docstring): ``{"dirs", "hide", "files", "packages", "sys_path"}``, absolute paths.
    Raises ValueError naming a package that is not installed, RuntimeError when the probe fails."""
    try:
        stdlib = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys, json; "
                                 "print(json.dumps(sys.path))"], capture_output=True, text=True,
                                timeout=60, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"sandbox: the interpreter's sys.path could not be read: {exc}") from exc
    dirs = [d for d in json.loads(stdlib.stdout) if os.path.isdir(d)]
    dirs = [d for d in dirs if not _under(d, [o for o in dirs if o != d])]  # topmost only
    hide = [os.path.join(d, name) for d in dirs for name in PACKAGE_DIRS
            if os.path.isdir(os.path.join(d, name))]
    sys_path, bound = [], []
    for name in packages:
        folder, paths = _package_dirs(name)
        sys_path += [folder] if folder not in sys_path else []
        bound += [p for p in paths if p not in bound]
    try:
        probe = subprocess.run(
            [sys.executable, "-I", "-S", os.path.abspath(__file__),
             json.dumps([list(packages), sys_path])],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuntimeError(f"sandbox: the runtime probe could not run: {exc}") from exc
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"sandbox: the runtime probe failed for packages {list(packages)}: "
                           f"{last}")
    files = [os.path.realpath(sys.executable)]
    for path in json.loads(probe.stdout.splitlines()[-1]):
        if (os.path.isabs(path) and os.path.isfile(path) and path not in files
                and not _under(path, dirs + bound)):
            files.append(path)
    return {"dirs": dirs, "hide": hide, "files": files, "packages": bound, "sys_path": sys_path}


if __name__ == "__main__":
    _probe(*json.loads(sys.argv[1]))
