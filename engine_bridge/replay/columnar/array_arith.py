"""The third arithmetic of the step rules: whole numpy arrays, one element per draft block.

reference/step.py is written over an `Arith` (reference/arith.py): the reference evaluates it
over ``int``, the proofs over Z3 terms. `ArrayArith` evaluates the very same functions
(`pipeline`, `admissibility`, `rfc_step`, `legacy_step`, ...) over int64 / bool arrays, so the
columnar checker applies the rules to a whole chunk of blocks at once and holds no copy of
any rule. Every operation is elementwise and exact: counts are bounded by k (<= 1024) and the
sums are taken in int64 only after the rules ran.

numpy and not torch: the rules are a few dozen elementwise operations on small integer
arrays, where numpy's per-call overhead is lower than torch's CPU dispatch, and numpy is
already needed for the columns; torch would also add a large (CUDA by default) dependency to
the ``bridge`` extra.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# What ``numpy.typing.NDArray`` spells, without importing numpy.typing at run time (about
# 10 ms of a replay's start-up, for annotations only).
Ints = np.ndarray[Any, np.dtype[np.int64]]
Bools = np.ndarray[Any, np.dtype[np.bool_]]
Num = Any  # an int64 array, or a Python int that numpy broadcasts (`lit`)
Cond = Any  # a bool array, or a numpy bool scalar (`truth`)


class ArrayArith:
    """`Arith` over numpy arrays (elementwise); literals stay scalars and broadcast."""

    def lit(self, value: int) -> Num:
        return np.int64(value)

    def add(self, a: Num, b: Num) -> Num:
        return np.add(a, b)

    def sub(self, a: Num, b: Num) -> Num:
        return np.subtract(a, b)

    def mul(self, a: Num, b: Num) -> Num:
        return np.multiply(a, b)

    def le(self, a: Num, b: Num) -> Cond:
        return np.less_equal(a, b)

    def lt(self, a: Num, b: Num) -> Cond:
        return np.less(a, b)

    def eq(self, a: Num, b: Num) -> Cond:
        return np.equal(a, b)

    def ite(self, cond: Cond, then: Num, other: Num) -> Num:
        return np.where(cond, then, other)

    def both(self, a: Cond, b: Cond) -> Cond:
        return np.logical_and(a, b)

    def either(self, a: Cond, b: Cond) -> Cond:
        return np.logical_or(a, b)

    def negate(self, a: Cond) -> Cond:
        return np.logical_not(a)

    def truth(self, value: bool) -> Cond:
        return np.bool_(value)

    def min(self, a: Num, b: Num) -> Num:
        return np.minimum(a, b)

    def max(self, a: Num, b: Num) -> Num:
        return np.maximum(a, b)


ARRAY_ARITH = ArrayArith()
