r"""GPQA-Diamond (Rein et al. 2023): 198 graduate-level multiple-choice science questions.

Data: ``datasets.load_dataset("Idavidrein/gpqa", "gpqa_diamond", split="train")`` (a gated
dataset: accept its terms on the hub once), or ``data_files`` in that format (columns
``Question``, ``Correct Answer``, ``Incorrect Answer 1..3``, ``Record ID``).  There is no
offline source: the one package in the index that carries the file declares no licence, and the
authors ask that the questions not be published.  So **question texts are never written
anywhere**: the objective sets ``publish_text = False`` (evaluations keep no completion text,
which may quote the question), and errors name rows by ``Record ID``.

Options: a fixed **per-question permutation** of the four options, keyed by the question's hash
(option ``i`` goes to the rank of ``blake2b("gpqa:" + i + ":" + question)`` among the four), so
the correct letter is not always the same and never depends on the run.  The gold letter is
where the correct answer lands.  Split: every question is ``test`` (``test_fraction`` as in
:mod:`objectives.splits`).

Reward: 1.0 iff the letter after the **last** ``Answer:`` (any case; a colon or a full-width
colon) is the gold letter.  Between ``Answer:`` and the letter, spaces and the wrappers
``* _ ` $ ( [ {`` and ``\boxed{``/``\text{``/``\textbf{``/``\mathrm{``/``\mathbf{`` are
skipped; the letter is an upper-case A–D not followed by another letter (``Answer: AB``,
``Answer: E``, ``Answer: a force`` give no letter).  The prompt is simple-evals' template.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from zoopt.objective import Objective, check_split

from .sources import HubDataset, check_source, load_hub, load_rows
from .splits import split_of

HUB = HubDataset("Idavidrein/gpqa", "train", name="gpqa_diamond")
LETTERS = "ABCD"
OPTION_COLUMNS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
TEMPLATE = ("Answer the following multiple choice question. The last line of your response should be "
            "of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. "
            "Think step by step before answering.\n\n{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}")
_ANSWER = re.compile(r"answer\s*[:：]", re.IGNORECASE)
_LETTER = re.compile(r"[\s*_`$(\[{]*(?:\\(?:boxed|text|textbf|mathrm|mathbf)\s*\{)?[\s*_`$(\[{]*"
                     r"([A-D])(?![A-Za-z])")
LOOKAHEAD = 40  # characters after the last "Answer:" that may hold the letter


def option_order(question: str) -> list[int]:
    """``order[k]`` = the option (0 = correct, 1–3 = incorrect) shown as letter ``k``."""
    def key(i: int) -> bytes:
        return hashlib.blake2b(f"gpqa:{i}:{question}".encode("utf-8"), digest_size=8).digest()
    return sorted(range(4), key=key)


def extract_letter(text: str) -> str | None:
    """The letter after the last ``Answer:`` (see the module doc), or None."""
    last = None
    for last in _ANSWER.finditer(text):
        pass
    if last is None:
        return None
    match = _LETTER.match(text, last.end(), last.end() + LOOKAHEAD)
    return match.group(1) if match else None


class GPQADiamond(Objective):
    """GPQA-Diamond; ``template`` is formatted with ``question``, ``A``, ``B``, ``C``, ``D``."""

    name = "gpqa_diamond"
    publish_text = False

    def __init__(self, source: str = "auto", data_files: Any = None, template: str = TEMPLATE,
                 system_prompt: str | None = None, test_fraction: float = 1.0) -> None:
        self.source = check_source(source, self.name, has_offline=False)
        try:
            template.format(question="q", A="a", B="b", C="c", D="d")
        except (KeyError, IndexError, ValueError, AttributeError) as exc:  # AttributeError: not a str
            raise ValueError(f"template must use only {{question}}, {{A}}..{{D}}: {exc!r}") from None
        if not 0.0 <= test_fraction <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction!r}")
        self.data_files, self.template, self.system_prompt = data_files, template, system_prompt
        self.test_fraction = float(test_fraction)
        self.data_source: str | None = None
        self._rows: list[dict] | None = None

    def rows(self) -> list[dict]:
        """Every question as ``{"prompt", "answer", "id"}`` (options permuted; see the module doc)."""
        if self._rows is None:
            raw, used = load_rows(self.name, self.source, lambda: load_hub(HUB, self.data_files), None)
            self.data_source = "files" if self.data_files is not None else used
            rows = []
            for i, row in enumerate(raw):
                name = f"row {i}" + (f" (Record ID {row['Record ID']!r})" if "Record ID" in row else "")
                missing = [c for c in ("Question",) + OPTION_COLUMNS if c not in row]
                if missing:
                    raise ValueError(f"{self.name}: {name} has no column {missing[0]!r}")
                options = [str(row[c] or "").strip() for c in OPTION_COLUMNS]
                if not options[0] or not all(options):
                    raise ValueError(f"{self.name}: {name} has an empty option (the gold answer cannot be placed)")
                question = str(row["Question"]).strip()
                order = option_order(question)
                shown = {LETTERS[k]: options[order[k]] for k in range(4)}
                rows.append({"prompt": self.template.format(question=question, **shown),
                             "answer": LETTERS[order.index(0)], "id": str(row.get("Record ID", i)),
                             "split": split_of(f"{self.name}:{question}", self.test_fraction)})
            self._rows = rows
        return self._rows

    def split_size(self, split: str) -> int:
        check_split(split)
        return sum(r["split"] == split for r in self.rows())

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        rows = [r for r in self.rows() if r["split"] == check_split(split)]
        if not rows:
            raise ValueError(f"{self.name} has no {split!r} questions at test_fraction={self.test_fraction:g}")
        if n is not None:
            if n > len(rows):
                raise ValueError(f"{self.name} has {len(rows)} {split!r} questions, {n} asked")
            rows = rows[:n]
        return Dataset.from_dict({k: [r[k] for r in rows] for k in ("prompt", "answer", "id")})

    def reward(self, prompt, completion: str, answer, **_) -> float:
        """1.0 iff the letter after the last ``Answer:`` is ``answer``."""
        return 1.0 if extract_letter(completion) == str(answer).strip() else 0.0

    def extract_answer(self, completion: str) -> str | None:
        return extract_letter(completion)
