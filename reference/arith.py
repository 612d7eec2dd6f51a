"""Arithmetic the step rules are written in, so one text of the rules runs over two domains.

The reference evaluates its step rules over Python ``int``/``bool`` (`INT_ARITH`). The proofs
evaluate the *same functions* over Z3 terms by passing a Z3 implementation of this protocol
(``spectally.proofs.z3arith``). That is why the rules never use ``min``, ``if`` or ``and`` on
quantities directly: every choice goes through an `Arith`, so nothing is hand-copied into a
solver model that could drift from the code.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

N = TypeVar("N")  # a count: int, or a Z3 integer term
B = TypeVar("B")  # a condition: bool, or a Z3 boolean term


class Arith(Protocol[N, B]):
    """The operations the step rules may use. Implementations must be exact (no overflow)."""

    def lit(self, value: int) -> N: ...
    def add(self, a: N, b: N) -> N: ...
    def sub(self, a: N, b: N) -> N: ...
    def mul(self, a: N, b: N) -> N: ...
    def le(self, a: N, b: N) -> B: ...
    def lt(self, a: N, b: N) -> B: ...
    def eq(self, a: N, b: N) -> B: ...
    def ite(self, cond: B, then: N, other: N) -> N: ...
    def both(self, a: B, b: B) -> B: ...
    def either(self, a: B, b: B) -> B: ...
    def negate(self, a: B) -> B: ...
    def truth(self, value: bool) -> B: ...

    def min(self, a: N, b: N) -> N: ...
    def max(self, a: N, b: N) -> N: ...


class IntArith:
    """`Arith` over Python integers: what the engine state machine and the CLI use."""

    def lit(self, value: int) -> int:
        return value

    def add(self, a: int, b: int) -> int:
        return a + b

    def sub(self, a: int, b: int) -> int:
        return a - b

    def mul(self, a: int, b: int) -> int:
        return a * b

    def le(self, a: int, b: int) -> bool:
        return a <= b

    def lt(self, a: int, b: int) -> bool:
        return a < b

    def eq(self, a: int, b: int) -> bool:
        return a == b

    def ite(self, cond: bool, then: int, other: int) -> int:
        return then if cond else other

    def both(self, a: bool, b: bool) -> bool:
        return a and b

    def either(self, a: bool, b: bool) -> bool:
        return a or b

    def negate(self, a: bool) -> bool:
        return not a

    def truth(self, value: bool) -> bool:
        return value

    def min(self, a: int, b: int) -> int:
        return a if a <= b else b

    def max(self, a: int, b: int) -> int:
        return a if a >= b else b


INT_ARITH = IntArith()
