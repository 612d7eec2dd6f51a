"""`Arith` over Z3 terms: the reference's step rules, evaluated symbolically.

`Z3_ARITH` is passed to the very functions the engine runs with ``INT_ARITH``
(``step.pipeline``, ``step.rfc_step``, ``counters.rfc_add_step``, ...). The result is a Z3 term
that *is* the reference code's answer for every input at once; nothing of the rules is copied
here. Counts are mathematical integers (``z3.Int``), so there is no overflow to reason about.
"""

from __future__ import annotations

from typing import TypeAlias

import z3

Num: TypeAlias = z3.ArithRef
Cond: TypeAlias = z3.BoolRef


class Z3Arith:
    """`spectally.reference.arith.Arith` over ``z3.ArithRef`` / ``z3.BoolRef``."""

    def lit(self, value: int) -> Num:
        return z3.IntVal(value)

    def add(self, a: Num, b: Num) -> Num:
        return a + b

    def sub(self, a: Num, b: Num) -> Num:
        return a - b

    def mul(self, a: Num, b: Num) -> Num:
        return a * b

    def le(self, a: Num, b: Num) -> Cond:
        return a <= b

    def lt(self, a: Num, b: Num) -> Cond:
        return a < b

    def eq(self, a: Num, b: Num) -> Cond:
        return a == b

    def ite(self, cond: Cond, then: Num, other: Num) -> Num:
        result: Num = z3.If(cond, then, other)
        return result

    def both(self, a: Cond, b: Cond) -> Cond:
        return z3.And(a, b)

    def either(self, a: Cond, b: Cond) -> Cond:
        return z3.Or(a, b)

    def negate(self, a: Cond) -> Cond:
        return z3.Not(a)

    def truth(self, value: bool) -> Cond:
        return z3.BoolVal(value)

    def min(self, a: Num, b: Num) -> Num:
        result: Num = z3.If(a <= b, a, b)
        return result

    def max(self, a: Num, b: Num) -> Num:
        result: Num = z3.If(a >= b, a, b)
        return result


Z3_ARITH = Z3Arith()
