"""The importers' inputs, checked together before any is read: one file named twice (the same
path, a symlink to it, a hard link) is refused, since its counts would enter every sum twice
(the requests' or log lines' totals against a scrape) and a scrape compared with itself shows
no movement, a check that checks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from ..steplog.source import BadInput, first_repeat


def refuse_repeats(inputs: Iterable[tuple[str, str | None]]) -> None:
    """`BadInput` naming the second of two ``(what, path)`` inputs that are one file
    (`source.first_repeat`: device and inode, through symlinks; ``-``, stdin, is read once
    too)."""
    named = list(inputs)
    repeat = first_repeat(path for _, path in named)
    if repeat is None:
        return
    (first_what, first_path), (what, path) = named[repeat[0]], named[repeat[1]]
    assert path is not None  # first_repeat leaves None paths out
    if path == "-":
        raise BadInput(
            path,
            1,
            1,
            f"{what} is stdin, as {first_what} is: stdin can be read once; save one of them"
            " to a file",
        )
    raise BadInput(
        path,
        1,
        1,
        f"{what} is the same file as {first_what} ({first_path!r}): name each input once"
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
