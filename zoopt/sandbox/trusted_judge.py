"""The trusted half of a judged program: the dataset's tests, run against stand-ins.

Standard library only; runs in a judge worker (``judge_worker.py``), never in the model's
process and never with the model's code.  :func:`judge` executes, in a fresh namespace,

1. ``setup`` — the dataset's trusted code (HumanEval's prompt with its helper functions,
   MBPP's imports);
2. a **stand-in** bound to each name of ``functions``: calling it sends the encoded arguments
   to the sandboxed program (``oracle_server.py``) and returns the decoded answer — exact
   builtin values only (``plain_data.py``);
3. the tests as units (``strict_tests.py``), which compare those values here, strictly.

A stand-in's answer is one of: the value (plain data; an object that is not plain data comes
back as a :class:`Remote` handle, which can be passed back to the program but used for nothing
else — comparing, hashing, testing its truth or reading an attribute raises
:class:`NotPlainData`); the model's exception (raised here as the builtin exception of that
name when there is one, else :class:`ModelException`); or no answer (the program exited,
crashed, timed out, or sent something that is not a reply — :class:`OracleGone`, and every later
call fails at once).  ``OracleGone`` and ``NotPlainData`` are ``BaseException``s, so a test's
``except Exception`` cannot swallow them, and a unit during which either happened fails even if
the test caught it: only answered calls can pass a test.

Each finished unit is reported as ``(i, outcome)``: ``"passed"``, ``"failed"`` (an assertion or
another exception of the test), ``"unanswered"`` (a call got no answer) or ``"not_plain"`` (a
value or argument that is not plain data was used).
"""

import builtins
import contextlib

try:
    from . import plain_data, strict_tests
except ImportError:  # loaded by path in the judge worker
    import plain_data
    import strict_tests

OUTCOMES = ("passed", "failed", "unanswered", "not_plain")


class OracleGone(BaseException):
    """The model's program did not answer a call."""


class NotPlainData(BaseException):
    """A value the judge cannot use: an object of the model's program that is not plain data,
    or an argument that cannot be sent."""


class ModelException(Exception):
    """The model's function raised an exception that is not a builtin one (its name is the
    message)."""


class Remote:
    """A handle to an object that lives in the model's program (see the module doc)."""

    __slots__ = ("_zoopt_ref", "_zoopt_oracle")

    def __init__(self, ref, oracle):
        object.__setattr__(self, "_zoopt_ref", ref)
        object.__setattr__(self, "_zoopt_oracle", oracle)

    def __call__(self, *args, **kwargs):
        return self._zoopt_oracle.call(self, args, kwargs)

    def __repr__(self):
        return f"<object #{self._zoopt_ref} of the model's program>"

    def _refuse(self, *args, **kwargs):
        self._zoopt_oracle.faults["not_plain"] += 1
        raise NotPlainData("an object of the model's program that is not plain data was used")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = __bool__ = _refuse
    __getattr__ = __setattr__ = __delattr__ = __len__ = __iter__ = __contains__ = _refuse
    __getitem__ = __setitem__ = __index__ = __int__ = __float__ = _refuse


class Oracle:
    """The judge's end of the channel: :meth:`call` one request, one reply at a time."""

    def __init__(self, fd, limit):
        self.fd, self.limit = fd, limit
        self.gone = None  # why the program stopped answering
        self.faults = {"unanswered": 0, "not_plain": 0}

    def call(self, target, args, kwargs):
        def ref_of(obj):
            if type(obj) is Remote and obj._zoopt_oracle is self:
                return {"ref": obj._zoopt_ref}
            if type(obj) is StandIn and obj._oracle is self:
                return {"global": obj.__name__}
            self.faults["not_plain"] += 1
            raise NotPlainData(f"an argument of type {type(obj).__name__} cannot be sent to the program")

        request = plain_data.encode([target, list(args), dict(kwargs)], ref_of).encode("utf-8", "surrogatepass")
        if len(request) > self.limit:
            self.faults["not_plain"] += 1
            raise NotPlainData(f"a request of {len(request)} bytes (the limit is {self.limit})")
        if self.gone is None:
            try:
                plain_data.write_frame(self.fd, request)
                reply = plain_data.decode(plain_data.read_frame(self.fd, self.limit),
                                           lambda tag, n: Remote(n, self) if tag == "ref" else _not_global(n))
                kind, body = _reply(reply)
            except (OSError, EOFError, plain_data.NotPlain) as exc:
                self.gone = f"{type(exc).__name__}: {exc}"[:200]
        if self.gone is not None:
            self.faults["unanswered"] += 1
            raise OracleGone(self.gone)
        if kind == "value":
            return body
        cls = getattr(builtins, body, None)
        if isinstance(cls, type) and issubclass(cls, Exception) and cls is not ModelException:
            raise cls(f"raised by the model's program ({body})")
        raise ModelException(body)


def _not_global(name):
    raise plain_data.NotPlain("the program may not name a global")


def _reply(reply):
    """``(kind, body)`` of a well-formed reply, else NotPlain."""
    if type(reply) is list and len(reply) == 2:
        kind, body = reply
        if kind == "value" or (kind == "raised" and type(body) is str):
            return kind, body
        if kind == "error" and type(body) is str:
            raise plain_data.NotPlain(f"the program could not answer: {body[:100]}")
    raise plain_data.NotPlain("not a reply")


class StandIn:
    """The global ``name`` of the model's program — a function called through the oracle, or
    a value (MBPP's trees) passed back to it as an argument."""

    def __init__(self, oracle, name):
        self._oracle, self.__name__ = oracle, name

    def __call__(self, *args, **kwargs):
        return self._oracle.call(self.__name__, args, kwargs)

    def __repr__(self):
        return f"<stand-in for {self.__name__}()>"


def judge(spec, fd, report):
    """Run the tests of ``spec`` (a dict: ``setup``, ``functions``, ``tests`` or ``check`` with
    ``entry``, ``max_message_bytes``) against the program on ``fd``; ``report(i, outcome)``
    for each unit that finished.  Returns the list of notes (why set-up or a call failed)."""
    oracle = Oracle(fd, int(spec["max_message_bytes"]))
    notes = []

    @contextlib.contextmanager
    def unit(i):
        before = dict(oracle.faults)
        try:
            yield
        except BaseException:  # noqa: BLE001 - a failed test is an outcome, not an error
            outcome = "failed"
        else:
            outcome = "passed"
        for kind in ("unanswered", "not_plain"):
            if oracle.faults[kind] != before[kind]:
                outcome = kind
        report(i, outcome)

    namespace = {"__name__": "__zoopt_tests__", "__builtins__": builtins,
                 strict_tests.UNIT: unit, **strict_tests.HELPERS}
    try:
        exec(compile(spec.get("setup") or "", "<setup>", "exec"), namespace)
        for name in spec["functions"]:
            namespace[name] = StandIn(oracle, name)
        if spec.get("check"):
            source, count = strict_tests.check_units(spec["check"])
            entry = spec["entry"]
            call = (f"with {strict_tests.UNIT}(0):\n    check({entry})\n" if count == 0
                    else f"check({entry})\n")
            exec(compile(source + "\n", "<tests>", "exec"), namespace)
            exec(compile(call, "<check>", "exec"), namespace)
        else:
            source, _ = strict_tests.statement_units(spec["tests"])
            exec(compile(source + "\n", "<tests>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - the units not reported count as failed
        notes.append(f"the tests stopped: {type(exc).__name__}: {exc}"[:300])
    if oracle.gone is not None:
        notes.append(f"the program stopped answering: {oracle.gone}")
    return notes
