"""User plugins: modules imported before names resolve, so what they register reaches every command.

A plugin is a Python module that registers names when it is imported — an objective with
``@objectives.register("name")``, an engine with ``ENGINES.register(...)``, a noise, an
estimator.  Three ways make zoopt import one:

* ``--plugin MODULE_OR_FILE`` on a command (repeatable): ``--plugin my_rewards`` (an importable
  module) or ``--plugin path/to/rewards.py`` (a file);
* ``ZOOPT_PLUGINS``: the same items separated by ``os.pathsep`` (``:`` on Linux), read whenever
  a registry looks a name up — so processes that zoopt starts (``zoopt compare``'s methods,
  ``zoopt sweep --workers``) import them too.  ``--plugin`` appends to it for that reason;
* an installed package's entry point in the group of the registry (``zoopt.objectives``,
  ``zoopt.engines``, …; see :mod:`zoopt.registry`), which needs no flag at all.

A file is imported once per process under a name derived from its absolute path
(:func:`import_file`), the same name whether it came as a plugin or as
``--objective path/to/file.py:attr``, so its registrations never run twice.  A plugin that
cannot be imported is a one-line :class:`PluginError` naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterable

ENV = "ZOOPT_PLUGINS"

_loaded: dict[str, ModuleType] = {}  # plugin item (a module name or an absolute file) → module


class PluginError(ImportError):
    """A plugin module or file that cannot be imported; the message is one line and names it."""


def is_file_spec(item: str) -> bool:
    """Whether ``item`` names a file (ends in ``.py`` or holds a path separator), not a module."""
    return item.endswith(".py") or "/" in item or "\\" in item


def _key(item: str) -> str:
    return str(Path(item).expanduser().resolve()) if is_file_spec(item) else item


def import_file(path: str | Path, what: str = "plugin") -> ModuleType:
    """Import the Python file ``path`` (once per process: the module is named after its absolute
    path); a missing file or a failing import is a one-line :class:`PluginError`."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise PluginError(f"{what} file {str(path)!r} does not exist")
    file = file.resolve()
    digest = hashlib.blake2b(str(file).encode(), digest_size=6).hexdigest()
    name = f"_zoopt_file_{''.join(c if c.isalnum() else '_' for c in file.stem)}_{digest}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise PluginError(f"cannot import {what} {str(path)!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginError(f"importing {what} {str(path)!r} failed: {type(exc).__name__}: {_one_line(exc)}") from exc
    return module


def import_plugin(item: str) -> ModuleType:
    """Import one plugin (a module name or a ``.py`` file); again is a no-op."""
    item = str(item).strip()
    if not item:
        raise PluginError("an empty plugin name")
    key = _key(item)
    if key in _loaded:
        return _loaded[key]
    if is_file_spec(item):
        module = import_file(item)
    else:
        try:
            module = importlib.import_module(item)
        except ModuleNotFoundError as exc:
            if exc.name and item.split(".")[0] == exc.name.split(".")[0]:
                raise PluginError(f"plugin module {item!r} not found (is it installed, or on PYTHONPATH? "
                                  f"a file is given as path/to/file.py)") from exc
            raise PluginError(f"importing plugin {item!r} failed: {type(exc).__name__}: {_one_line(exc)}") from exc
        except Exception as exc:
            raise PluginError(f"importing plugin {item!r} failed: {type(exc).__name__}: {_one_line(exc)}") from exc
    _loaded[key] = module
    return module


def env_plugins() -> list[str]:
    """The items of ``ZOOPT_PLUGINS`` (empty items dropped)."""
    return [item.strip() for item in os.environ.get(ENV, "").split(os.pathsep) if item.strip()]


def load_env_plugins() -> list[ModuleType]:
    """Import every plugin of ``ZOOPT_PLUGINS`` not imported yet (registries call this before a
    lookup; cheap when they all are)."""
    return [import_plugin(item) for item in env_plugins()]


def add_plugins(items: Iterable[str]) -> list[ModuleType]:
    """Import ``items`` now (``--plugin``) and append them to ``ZOOPT_PLUGINS`` (files as absolute
    paths), so that processes started from here import them as well."""
    items = [str(item) for item in items]
    modules = [import_plugin(item) for item in items]
    present = env_plugins()
    for item in items:
        value = _key(item)
        if value not in present and item not in present:
            present.append(value)
    if present:
        os.environ[ENV] = os.pathsep.join(present)
    return modules


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


__all__ = ["ENV", "PluginError", "import_plugin", "import_file", "load_env_plugins", "add_plugins",
           "env_plugins", "is_file_spec"]
