"""The sandboxed half of a judged program: answer calls of the model's functions, nothing else.

Appended (with ``plain_data.py``'s source, in a namespace of its own) after the model's code
and the dataset's program set-up by :func:`zoopt.sandbox.judged_tests.oracle_program`; runs in the
sandbox, so nothing here is trusted — whatever it sends is only data that the judge decodes
into exact builtin values and compares itself.

Protocol on fd 3 (one frame per message, see ``plain_data.py``): each request is the plain
data ``[target, args, kwargs]`` — ``target`` the name of a global of the model's program or a
handle of an object kept earlier — and each reply one of ``["value", v]`` (an object that is not
plain data is kept and sent as a handle), ``["raised", "<exception type name>"]`` or
``["error", "<one line>"]``.  The loop ends at end of file: when the judge is done.
"""

try:  # in the sandbox this source follows plain_data.py's in one namespace
    from plain_data import NotPlain, decode, encode, read_frame, write_frame
except ImportError:
    pass


def serve(program, fd=3, limit=1 << 22):
    """Answer requests on ``fd`` with the globals of ``program`` (a dict) until end of file."""
    kept = []

    def keep(obj):
        kept.append(obj)
        return {"ref": len(kept) - 1}

    def refs(tag, body):
        if tag == "global":
            return program[body]
        if not 0 <= body < len(kept):
            raise NotPlain(f"no handle {body}")
        return kept[body]

    while True:
        try:
            target, args, kwargs = decode(read_frame(fd, limit), refs)
            function = target if type(target) is not str else program[target]
        except EOFError:
            return
        except KeyError:  # the program does not define the name
            reply = encode(["raised", "NameError"])
        except BaseException as exc:  # noqa: BLE001 - a malformed request
            reply = encode(["error", f"bad request: {type(exc).__name__}"])
        else:
            reply = _call(function, args, kwargs, keep)
        data = reply.encode("utf-8", "surrogatepass")
        if len(data) > limit:
            data = encode(["error", f"a reply of {len(data)} bytes (the limit is {limit})"]).encode()
        write_frame(fd, data)


def _call(function, args, kwargs, keep):
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the model's exception is the answer
        return encode(["raised", str(type(exc).__name__)[:100]])
    try:
        return encode(["value", value], keep)
    except BaseException as exc:  # noqa: BLE001 - e.g. a self-referencing list
        return encode(["error", f"{type(exc).__name__} while encoding the result"])
