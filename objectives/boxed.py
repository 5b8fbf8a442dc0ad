r"""Final answers written as ``\boxed{...}``: find the last one, bound it, normalise it.

String work only, linear in the input and bounded: nothing here parses mathematics (that is
:mod:`objectives.math_equivalence`, in worker processes).

* :func:`last_boxed` — the content of the **last** ``\boxed{...}`` (or ``\fbox{...}``) of a
  text, braces matched (``\{``/``\}`` are escaped braces, not groups); ``\boxed 5`` (no braces)
  gives ``5``.  None when there is none, when the last one is unbalanced, or when its content is
  longer than ``max_chars``.  Only the last box counts: earlier boxes are drafts, and handing
  math-verify several boxes makes it join them (``\boxed{1}\boxed{2}`` read as ``{1, 2}``).
* :func:`normalize` — a canonical string for exact comparison and majority voting:
  NUL bytes, ``$``, spacing commands (``\,`` ``\;`` ``\!`` ``\ ``), ``\left``/``\right`` and
  whitespace removed, ``\dfrac``/``\tfrac`` → ``\frac``, a trailing ``.`` dropped, and a plain
  decimal number canonicalised as in :mod:`objectives.answers` (``007`` → ``7``, ``2.50`` → ``2.5``).
* :func:`too_deep` — whether brackets (``( [ {``) nest deeper than ``MAX_DEPTH`` (6): no final
  answer does, and math-verify's parser takes tens of seconds on 30 nested parentheses.
* :func:`plain_number` — whether a normalised answer is a plain decimal number (``-?\d+(\.\d+)?``);
  two plain numbers are equal iff their normalised strings are.
"""

from __future__ import annotations

import re

from .answers import canonical_number

MAX_ANSWER_CHARS = 1000
MAX_DEPTH = 6
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_DROP = re.compile(r"\\left\b|\\right\b|\\[,;:! ]|\$|\x00")
_FRACS = re.compile(r"\\[dt]frac\b")
_NUMBER = re.compile(r"(-?)(\d+)(?:\.(\d+))?")


def last_boxed(text: str, max_chars: int = MAX_ANSWER_CHARS) -> str | None:
    r"""The content of the last ``\boxed{...}``/``\fbox{...}`` of ``text`` (see the module doc)."""
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    command = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    i = start + len(command)
    while i < len(text) and text[i] in " \t":
        i += 1
    if i >= len(text):
        return None
    if text[i] != "{":  # \boxed 5: the next run of characters up to a space or $
        match = re.match(r"[^\s${}]{1,%d}" % max_chars, text[i:i + max_chars + 1])
        return match.group(0) if match and text[i - 1] in " \t" else None
    depth, j, stop = 0, i, min(len(text), i + max_chars + 2)
    while j < stop:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
        j += 1
    return None  # unbalanced, or longer than max_chars


def normalize(answer: str) -> str:
    """The canonical string of an answer (see the module doc)."""
    text = _FRACS.sub(r"\\frac", _DROP.sub("", answer))
    text = "".join(text.split()).rstrip(".")
    match = _NUMBER.fullmatch(text)
    return canonical_number(*match.groups(default="")) if match else text


def plain_number(normalized: str) -> bool:
    """Whether ``normalized`` (from :func:`normalize`) is a plain decimal number."""
    return _NUMBER.fullmatch(normalized) is not None


def too_deep(answer: str, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``( [ {`` nest deeper than ``max_depth`` in ``answer`` (unbalanced closers ignored)."""
    depth = 0
    for ch in answer:
        if ch in "([{":
            depth += 1
            if depth > max_depth:
                return True
        elif ch in ")]}" and depth:
            depth -= 1
    return False
