"""The plain-data codec between a sandboxed program and its judge (zoopt/sandbox/plain_data.py)."""

from __future__ import annotations

import collections
import math
import os

import pytest

from zoopt.sandbox.plain_data import NotPlain, decode, encode, read_frame, write_frame

VALUES = [None, True, False, 0, -7, 2**63 - 1, 2**63, -(10**400), 1.5, -0.0, math.inf, "é\ud800x",
          b"\x00\xff", [1, [2]], (1, (2, "a")), {1, 2}, frozenset({"a"}), {(1, 2): [3], "k": None},
          {True: 1, 2: False}, 1 + 2j, int, str, ()]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_round_trip_keeps_exact_types(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)  # -0.0 stays -0.0, True stays True


def test_nan_round_trips_as_nan():
    assert math.isnan(decode(encode(float("nan"))))


def test_the_wire_format_is_json_with_one_key_tags():
    assert encode([1, (2,), {3: b"\x04"}, 2**64]) == (
        '[1,{"tuple":[2]},{"dict":[[3,{"bytes":"04"}]]},{"int":"0x10000000000000000"}]')


class Always(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [Always(1), type("S", (str,), {})("x"), object(), (x for x in ()),
                                   [1, Always(2)], {"k": object()}, math.sqrt],
                         ids=["int subclass", "str subclass", "object", "generator", "nested",
                              "dict value", "function"])
def test_anything_else_is_not_plain_or_a_handle(value):
    with pytest.raises(NotPlain, match="not plain data"):
        encode(value)
    kept = []
    text = encode(value, keep=lambda obj: kept.append(obj) or {"ref": len(kept) - 1})
    assert '{"ref":0}' in text and kept and decode(text, lambda tag, n: ("handle", tag, n)) is not None


def test_the_standard_library_dicts_travel_as_plain_dicts():
    for value in (collections.Counter("aab"), collections.OrderedDict(a=1),
                  collections.defaultdict(list, a=[1])):
        back = decode(encode(value))
        assert type(back) is dict and back == dict(value)


@pytest.mark.parametrize("text", ['{"a": 1, "b": 2}', '{"tuple": 1}', '{"nope": []}', '{"ref": 0}',
                                  '{"set": [[1]]}', '{"dict": [[1]]}', '{"complex": [1, 2]}',
                                  '{"type": "eval"}', "[" * 100_000, "9" * 5000, "[1,", "NaNa"])
def test_the_decoder_refuses_what_is_not_plain_data(text):
    with pytest.raises(NotPlain):
        decode(text)


def test_frames_have_a_length_limit_checked_before_reading():
    r, w = os.pipe()
    try:
        write_frame(w, b"hello")
        write_frame(w, b"x" * 100)
        assert read_frame(r, 10) == b"hello"
        with pytest.raises(NotPlain, match="100 bytes"):
            read_frame(r, 99)
        assert os.read(r, 200) == b"x" * 100  # the refused frame's body was left unread
        os.close(w)
        w = None
        with pytest.raises(EOFError):
            read_frame(r, 10)
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
