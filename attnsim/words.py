"""Suggestions for misspelled keys, choices and names (the command line and every config check)."""

from __future__ import annotations

from collections.abc import Iterable


def edit_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance: insertions, deletions, substitutions
    and swaps of neighbours each cost 1."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cost = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, prev2[j - 2] + 1)
            cur.append(cost)
        prev2, prev = prev, cur
    return prev[-1]


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """The closest choice when it is a likely typo (a case change, or at most
    one edit per four letters), else None."""
    choices = list(choices)
    if not choices or not word:
        return None
    best = min(choices, key=lambda c: (edit_distance(word.lower(), c.lower()), c))
    dist = edit_distance(word.lower(), best.lower())
    # a one-letter word is one edit from every one-letter key: a hint needs a letter in common
    return best if dist <= max(1, len(word) // 4) and dist < max(len(word), len(best)) else None
