"""The importers' inputs, checked together before any is read: one file named twice (the same
path, a symlink to it, a hard link) is refused, since its counts would enter every sum twice
(the requests' or log lines' totals against a scrape) and a scrape compared with itself shows
no movement, a check that checks nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..steplog.source import BadInput


def refuse_repeats(inputs: Iterable[tuple[str, str | None]]) -> None:
    """`BadInput` naming the second of two ``(what, path)`` inputs that are one file (device and
    inode, through symlinks). ``-`` (stdin), ``None`` and a path that cannot be looked at
    (its reader names why) are left out."""
    seen: dict[tuple[int, int], tuple[str, str]] = {}
    for what, path in inputs:
        if path is None or path == "-":
            continue
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        first = seen.setdefault((st.st_dev, st.st_ino), (what, path))
        if first != (what, path):
            raise BadInput(
                path,
                1,
                1,
                f"{what} is the same file as {first[0]} ({first[1]!r}): name each input once"
                " (read twice, its counts would enter the sums twice, or a scrape be compared"
                " with itself)",
            )
