"""The importers' inputs, checked together before any is read: one file named twice (the same
path, a symlink to it, a hard link) is refused, since its counts would enter every sum twice
(the requests' or log lines' totals against a scrape) and a scrape compared with itself shows
no movement, a check that checks nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable

from ..steplog.source import BadInput


def refuse_repeats(inputs: Iterable[tuple[str, str | None]]) -> None:
    """`BadInput` naming the second of two ``(what, path)`` inputs that are one file (device and
    inode, through symlinks; ``-``, stdin, is read once too). ``None`` and a path that cannot be
    looked at (its reader names why) are left out."""
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    for what, path in inputs:
        if path is None:
            continue
        if path == "-":  # stdin: its bytes come once, so a second reader would find none
            key = (-1, -1)
        else:
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
            key = (st.st_dev, st.st_ino)
        first = seen.setdefault(key, (what, path))
        if first != (what, path) and path == "-":
            raise BadInput(
                path,
                1,
                1,
                f"{what} is stdin, as {first[0]} is: stdin can be read once; save one of them"
                " to a file",
            )
        if first != (what, path):
            raise BadInput(
                path,
                1,
                1,
                f"{what} is the same file as {first[0]} ({first[1]!r}): name each input once"
                " (read twice, its counts would enter the sums twice, or a scrape be compared"
                " with itself)",
            )


def refuse_second(
    seen: dict[Hashable, int], key: Hashable, path: str, line: int, why: Callable[[int], str]
) -> None:
    """Note ``key`` at ``line`` of ``path``; `BadInput` there when an earlier line holds it
    (``why(first line)`` says what the repeat would have hidden or counted twice). For inputs
    of one sample or record per line."""
    first = seen.setdefault(key, line)
    if first != line:
        raise BadInput(path, line, 1, why(first))
