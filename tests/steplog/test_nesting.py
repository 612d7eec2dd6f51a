"""`source.too_deep` (C-level passes first, the token loop only past the limit) against the
plain token-by-token count it stands for, on bytes made of brackets, quotes, escapes and
multi-byte characters: the same offset, or None, on every input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from spectally.engine_bridge.steplog import source
from spectally.engine_bridge.steplog.limits import MAX_DEPTH

PIECES = [b"[", b"]", b"{", b"}", b'"', b"\\", b"a", b"\xc3\xa9", b" ", b'"[{"', b'\\"']


def token_count(data: bytes) -> int | None:
    """The first bracket past MAX_DEPTH, counted token by token (strings skipped)."""
    depth = 0
    for m in source._TOKENS.finditer(data):
        if data[m.start()] in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                return len(data[: m.start()].decode("utf-8", "replace"))
        elif data[m.start()] in b"]}":
            depth -= 1
    return None


@given(
    st.integers(0, MAX_DEPTH + 8),
    st.lists(st.sampled_from(PIECES), max_size=120),
    st.lists(st.sampled_from(PIECES), max_size=40),
)
def test_too_deep_is_the_token_count(opened: int, before: list[bytes], after: list[bytes]) -> None:
    data = b"".join(before) + b"{" * opened + b"".join(after)
    assert source.too_deep(data) == token_count(data)
    assert source.too_deep(data.decode("utf-8")) == token_count(data)  # a str: its UTF-8


def test_the_limit_itself() -> None:
    """Nesting of exactly MAX_DEPTH passes; one more names that bracket, also after strings
    and closed brackets (the C-level pass must not miss a depth by one)."""
    for prefix in (b"", b'"[[{" ', b"[]{}" * 3, b'["\\"[", 1] '):
        assert source.too_deep(prefix + b"[" * MAX_DEPTH) is None
        assert source.too_deep(prefix + b"[" * (MAX_DEPTH + 1)) == len(prefix) + MAX_DEPTH
