"""Number extraction shared by the objectives: find numbers in model output, canonicalise them.

A *number token* is an optional minus sign, a run of digits and commas, and an optional decimal
part: ``-?\\d[\\d,]*(\\.\\d+)?``.  It does not start inside a word or right after a ``.``
(``x2`` and ``v1.5`` hold no number; ``5-3`` holds ``5`` and ``3``, ``=-8`` holds ``-8``).
Commas that form thousands groups (``1,234,567``) join one number; any other commas separate
numbers (``3,5`` is ``3`` then ``5``).  A trailing ``.`` is punctuation (``82.`` is ``82``).

The canonical form of a number is a string: ``-`` when negative, the integer part without
leading zeros, and the fractional part without trailing zeros (``"007"`` → ``"7"``,
``"2.50"`` → ``"2.5"``, ``"-0.0"`` → ``"0"``, ``"1,234"`` → ``"1234"``).  Everything is string
work, linear in the input: a megabyte of digits never goes through ``int()``.
"""

from __future__ import annotations

import re
from typing import Iterator

_TOKEN = re.compile(r"(?<![\w.])(-?)(\d[\d,]*)(?:\.(\d+))?")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")


def canonical_number(sign: str, integer: str, fraction: str = "") -> str:
    """The canonical string of ``sign integer.fraction`` (digits only in ``integer``/``fraction``)."""
    integer = integer.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    body = f"{integer}.{fraction}" if fraction else integer
    return body if body == "0" or sign != "-" else "-" + body


def iter_numbers(text: str) -> Iterator[str]:
    """The canonical numbers in ``text``, left to right."""
    for match in _TOKEN.finditer(text):
        sign, digits, fraction = match.group(1), match.group(2).rstrip(","), match.group(3) or ""
        if "," not in digits or _THOUSANDS.fullmatch(digits):
            yield canonical_number(sign, digits.replace(",", ""), fraction)
            continue
        pieces = [p for p in digits.split(",") if p]
        for k, piece in enumerate(pieces):
            yield canonical_number(sign if k == 0 else "", piece,
                                   fraction if k == len(pieces) - 1 else "")


def last_number(text: str) -> str | None:
    """The canonical form of the last number in ``text``, or None."""
    last = None
    for last in iter_numbers(text):
        pass
    return last


def first_number(text: str) -> str | None:
    """The canonical form of the first number in ``text``, or None."""
    return next(iter_numbers(text), None)


def parse_number(text: str) -> str | None:
    """The canonical form of ``text`` when it is exactly one number (surrounding spaces
    allowed), else None."""
    match = _TOKEN.fullmatch(text.strip())
    if match is None:
        return None
    numbers = list(iter_numbers(match.group(0)))
    return numbers[0] if len(numbers) == 1 else None
