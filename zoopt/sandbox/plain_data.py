"""Plain data: the only values that cross between a model's program and the judge of its tests.

Standard library only, self-contained: its source also runs inside the sandboxed program
(:mod:`zoopt.sandbox.judged_tests` appends it there), and the judge worker loads it by path.

**Encoding.**  JSON text where a value is

* ``None``, ``bool``, ``float`` (``NaN``/``Infinity`` as Python's ``json`` writes them), ``str``,
  a ``list`` of values, or an ``int`` with ``|x| < 2**63`` — as themselves;
* a one-key object for everything else: ``{"tuple": [...]}``, ``{"set": [...]}``,
  ``{"frozenset": [...]}``, ``{"bytes": "<hex>"}``, ``{"complex": [re, im]}``,
  ``{"dict": [[key, value], ...]}``, ``{"int": "<hex>"}`` (big integers: hexadecimal, so no
  decimal conversion limit applies and decoding is linear), ``{"type": "int"}`` (a builtin
  class, such as a test passes to ``isinstance``-filtering functions), and the *handles*
  ``{"ref": n}`` (the n-th object the other side keeps) and ``{"global": "name"}`` (a global
  of the model's program).

Only exact types count (``type(x) is int``, never ``isinstance``): an ``int`` subclass, an
object whose ``__eq__`` says yes to everything, a generator — none of them is plain data.  The
one allowance: the standard library's ``Counter``, ``OrderedDict`` and ``defaultdict``, which
Python compares as dicts, are sent as the plain dict of their contents (read with
``dict.items``, so no method of theirs runs).  :func:`encode` hands any other object to
``keep`` (which returns its handle, a one-key dict) or, without ``keep``, raises
:class:`NotPlain`.  :func:`decode` builds exact builtin values only, or calls
``handles(tag, body)`` for a handle; anything else (an unknown tag, a list where a key must be
hashable, nesting deeper than the interpreter's recursion limit) raises :class:`NotPlain`.

**Frames.**  A message is a 4-byte big-endian length and that many bytes; :func:`read_frame`
refuses a length above its ``limit`` before reading it, so a peer cannot make the reader hold
more than ``limit`` bytes.
"""

import json
import os

_SMALL_INT = 1 << 63
_HEADER = 4
_BUILTIN_TYPES = {t.__name__: t for t in (type(None), bool, int, float, complex, str, bytes, bytearray,
                                          list, tuple, set, frozenset, dict, object, type)}


class NotPlain(Exception):
    """A value that is not plain data, or text that does not decode to plain data."""


def encode(value, keep=None):
    """The JSON text of ``value`` (see the module doc); ``keep(obj)`` gives the handle of any
    other object (``{"ref": n}`` or ``{"global": name}``), else such an object raises
    :class:`NotPlain`."""
    try:
        return json.dumps(_tagged(value, keep), allow_nan=True, separators=(",", ":"))
    except RecursionError:
        raise NotPlain("nested too deeply") from None


def _tagged(value, keep):
    kind = type(value)
    if value is None or kind is bool or kind is float or kind is str:
        return value
    if kind is int:
        return value if -_SMALL_INT < value < _SMALL_INT else {"int": hex(value)}
    if kind is list:
        return [_tagged(v, keep) for v in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {kind.__name__: [_tagged(v, keep) for v in value]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is dict or kind in _dict_like():
        return {"dict": [[_tagged(k, keep), _tagged(v, keep)] for k, v in dict.items(value)]}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    if kind is type and _BUILTIN_TYPES.get(value.__name__) is value:
        return {"type": value.__name__}
    if keep is None:
        raise NotPlain(f"a {kind.__name__!s:.60} is not plain data")
    handle = keep(value)
    if type(handle) is not dict or len(handle) != 1:
        raise NotPlain("a handle must be a one-key dict")
    return handle


def _dict_like():
    import collections

    return (collections.Counter, collections.OrderedDict, collections.defaultdict)


def decode(text, handles=None):
    """The value encoded in ``text`` (str or bytes); ``handles(tag, body)`` gives the object of
    a handle (``"ref"`` with an int, ``"global"`` with a str; without ``handles`` a handle is an
    error).  Raises :class:`NotPlain` on anything else."""
    def tagged(pairs):
        if len(pairs) != 1:
            raise NotPlain("an object must have exactly one tag")
        tag, body = pairs[0]
        if handles is not None and ((tag == "ref" and type(body) is int)
                                    or (tag == "global" and type(body) is str)):
            return handles(tag, body)
        if tag == "int" and type(body) is str:
            return int(body, 16)
        if tag == "bytes" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "dict" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
            return dict(body)
        if tag == "complex" and type(body) is list and len(body) == 2 and all(type(x) is float for x in body):
            return complex(*body)
        if tag == "type" and type(body) is str and body in _BUILTIN_TYPES:
            return _BUILTIN_TYPES[body]
        if tag in ("tuple", "set", "frozenset") and type(body) is list:
            return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](body)
        raise NotPlain(f"unknown or malformed tag {tag!r:.40}")

    try:
        return json.loads(text, object_pairs_hook=tagged)
    except NotPlain:
        raise
    except (ValueError, TypeError, RecursionError, MemoryError, OverflowError) as exc:
        raise NotPlain(f"undecodable: {type(exc).__name__}") from None


def write_frame(fd, data):
    """Send ``data`` (bytes) as one frame on file descriptor ``fd``."""
    view = memoryview(len(data).to_bytes(_HEADER, "big") + data)
    while view:
        view = view[os.write(fd, view):]


def read_frame(fd, limit):
    """The next frame's bytes from ``fd``; EOFError at end of file (also mid-frame), NotPlain
    for a frame longer than ``limit`` bytes (nothing of it is read)."""
    size = int.from_bytes(_read_exactly(fd, _HEADER), "big")
    if size > limit:
        raise NotPlain(f"a message of {size} bytes (the limit is {limit})")
    return _read_exactly(fd, size)


def _read_exactly(fd, n):
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the peer closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
