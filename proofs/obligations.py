"""Proof obligations and how one is discharged by Z3.

An obligation is ``hypotheses -> goal``. It *holds* when ``hypotheses ∧ ¬goal`` is unsat; it
*fails* with a model otherwise. Before that, the hypotheses alone must be satisfiable: an
obligation whose hypotheses contradict each other would hold vacuously, and is reported as
``vacuous`` (never as proved).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3
from spectally.reference.step import Mode

from .model import State, SymInputs, default_context
from .z3arith import Cond, Num

# Every solver check is bounded by Z3's resource limit ("rlimit"), a count of solver work that
# is the same on an idle and on a loaded machine, so whether an obligation holds, fails or is
# unknown never depends on the clock (developers' guide: a verdict must not depend on load).
# The budget is per check (Z3's rlimit is relative to the context's running count). Measured by
# `python -m spectally.proofs.calibrate`: the costliest check uses ~80 thousand units on the
# reference and ~5 million under the mutants; 200 million is ~40x and ~2,500x that
# (docs/proofs.md, "Solver budget"). One check under a mutant runs out (the linearising
# solver's on step:INV-5 sync under position-increment-le); the default solver then answers.
DEFAULT_RLIMIT = 200_000_000
# Wall-clock limit per check: a safety net only, so that a Z3 stage that does not count
# resources cannot hang a run (like CAP_S in tests/proofs/test_crosshair.py). Z3 does roughly a
# million units a second here, so the budget, not the clock, decides even on a heavily loaded
# machine.
SAFETY_TIMEOUT_MS = 3_600_000


@dataclass(frozen=True)
class Budget:
    """Per solver check: ``rlimit`` Z3 resource units (decides), ``timeout_ms`` (safety net)."""

    rlimit: int = DEFAULT_RLIMIT
    timeout_ms: int = SAFETY_TIMEOUT_MS


DEFAULT_BUDGET = Budget()


@dataclass(frozen=True)
class Shown:
    """What a counterexample prints: named blocks of inputs, states and extra terms."""

    inputs: dict[str, tuple[Mode | None, SymInputs]] = field(default_factory=dict)
    states: dict[str, State] = field(default_factory=dict)
    terms: dict[str, Num | Cond] = field(default_factory=dict)


@dataclass(frozen=True)
class Obligation:
    label: str
    hypotheses: tuple[Cond, ...]
    goal: Cond
    shown: Shown = field(default_factory=Shown)
    minimize: tuple[Num, ...] = ()  # for readable witnesses: smallest values first
    # Builds the witness of a failed obligation from a model (default: `describe_model`).
    witness: Callable[[z3.ModelRef], dict[str, Any]] | None = None


@dataclass
class Outcome:
    label: str
    status: str  # holds | fails | unknown | vacuous
    seconds: float
    witness: dict[str, Any] | None = None
    reason: str = ""
    rlimit: int = 0  # Z3 resource units used by the costliest check (compare with the budget)
    # (result, resource units) of every check, in order: sanity, then the solver(s) tried.
    checks: list[tuple[str, int]] = field(default_factory=list)


def discharge(ob: Obligation, budget: Budget = DEFAULT_BUDGET) -> Outcome:
    start = time.perf_counter()
    used = 0
    clock_hit = False
    checks: list[tuple[str, int]] = []

    def check(solver: z3.Solver | z3.Optimize) -> z3.CheckSatResult:
        nonlocal used, clock_hit
        solver.set("rlimit", budget.rlimit)
        solver.set("timeout", budget.timeout_ms)
        before, t0 = _rlimit_count(solver), time.perf_counter()
        result = solver.check()
        checks.append((str(result), _rlimit_count(solver) - before))
        used = max(used, checks[-1][1])
        clock_hit = result == z3.unknown and time.perf_counter() - t0 >= budget.timeout_ms / 1000
        return result

    def unknown(solver: z3.Solver | z3.Optimize) -> Outcome:
        if used >= budget.rlimit:
            reason = f"resource budget exhausted (rlimit {budget.rlimit})"
        elif clock_hit:  # load-dependent by nature: the report says so
            reason = f"wall-clock safety net hit ({budget.timeout_ms / 1000:g} s per check)"
        else:
            reason = f"solver returned unknown: {solver.reason_unknown()}"
        return Outcome(
            ob.label,
            "unknown",
            time.perf_counter() - start,
            reason=reason,
            rlimit=used,
            checks=checks,
        )

    # Each obligation is solved in a fresh Z3 context, its terms copied in: the work Z3 does (and
    # so its resource count) then depends on the obligation alone, not on what the process
    # solved before it (a shared context's caches and term ids made a mutant's use vary 100x
    # with the run order). The model is copied back for the witness builders.
    ctx = z3.Context()
    hypotheses, negated = _in_context(ob, ctx)
    sanity = z3.Solver(ctx=ctx)
    sanity.add(*hypotheses)
    first = check(sanity)
    if first == z3.unsat:
        seconds = time.perf_counter() - start
        reason = "hypotheses unsat"
        return Outcome(ob.label, "vacuous", seconds, reason=reason, rlimit=used, checks=checks)
    if first == z3.unknown:  # satisfiable hypotheses not shown: nothing can be claimed
        return unknown(sanity)
    last: z3.Solver | z3.Optimize
    if ob.minimize:
        last = opt = z3.Optimize(ctx=ctx)
        opt.add(*hypotheses)
        opt.add(negated)
        for term in ob.minimize:
            opt.minimize(term.translate(ctx))
        result = check(opt)
        model = opt.model() if result == z3.sat else None
    else:
        result, model = z3.unknown, None
        for make in SOLVERS:
            last = solver = make(ctx)
            solver.add(*hypotheses)
            solver.add(negated)
            result = check(solver)
            if result != z3.unknown:
                model = solver.model() if result == z3.sat else None
                break
    seconds = time.perf_counter() - start
    if result == z3.unsat:
        return Outcome(ob.label, "holds", seconds, rlimit=used, checks=checks)
    if model is None:
        return unknown(last)
    builder = ob.witness or (lambda m: describe_model(ob, m))
    with default_context(ob.goal.ctx):  # the builder's own terms join the obligation's
        witness = builder(model.translate(ob.goal.ctx))
    return Outcome(ob.label, "fails", seconds, witness=witness, rlimit=used, checks=checks)


def _in_context(ob: Obligation, ctx: z3.Context) -> tuple[list[Cond], Cond]:
    """The obligation's hypotheses and negated goal, copied into ``ctx``."""
    return [h.translate(ctx) for h in ob.hypotheses], z3.Not(ob.goal.translate(ctx))


def smtlib(ob: Obligation) -> str:
    """The goal check of ``ob`` as SMT-LIB 2: the assertions `discharge` gives the solver
    (hypotheses and the negated goal, in a fresh context), then ``(check-sat)``."""
    ctx = z3.Context()
    hypotheses, negated = _in_context(ob, ctx)
    solver = z3.Solver(ctx=ctx)
    solver.add(*hypotheses)
    solver.add(negated)
    return f"; {ob.label}\n{solver.to_smt2()}"


def _rlimit_count(solver: z3.Solver | z3.Optimize) -> int:
    """The context's running resource count (cumulative over the context, hence the deltas)."""
    return int(solver.statistics().get_key_value("rlimit count"))


def _linearising_solver(ctx: z3.Context) -> z3.Solver:
    """Sum-of-monomials normal form with ``If`` lifted out: ``k * (n + If(c, 1, 0))`` becomes
    ``k*n + k*t`` with t a fresh 0/1 term, then Z3's older arithmetic solver (``arith.solver=2``),
    which settles INV-7/INV-8's ``k * spec_steps`` obligations in milliseconds where the default
    one sometimes times out. `SOLVERS` falls back to the default solver on unknown."""
    tactic = z3.Then(
        z3.With("simplify", som=True, ctx=ctx),
        "elim-term-ite",
        z3.With("simplify", som=True, ctx=ctx),
        z3.With("smt", ctx=ctx, **{"arith.solver": 2}),
        ctx=ctx,
    )
    solver: z3.Solver = tactic.solver()
    return solver


def _default_solver(ctx: z3.Context) -> z3.Solver:
    return z3.Solver(ctx=ctx)


SOLVERS: tuple[Callable[[z3.Context], z3.Solver], ...] = (_linearising_solver, _default_solver)


def as_int(model: z3.ModelRef, term: Num) -> int:
    value = model.eval(term, model_completion=True)
    return int(value.as_long())


def as_bool(model: z3.ModelRef, term: Cond) -> bool:
    return bool(z3.is_true(model.eval(term, model_completion=True)))


def concrete_inputs(model: z3.ModelRef, x: SymInputs) -> dict[str, int | bool]:
    out: dict[str, int | bool] = {}
    for name, term in vars(x).items():
        out[name] = as_bool(model, term) if z3.is_bool(term) else as_int(model, term)
    return out


def describe_model(ob: Obligation, model: z3.ModelRef) -> dict[str, Any]:
    """A counterexample (to the claim, or to induction) as plain data."""
    from .witness import command_for, query_from

    out: dict[str, Any] = {"obligation": ob.label}
    for name, (mode, x) in ob.shown.inputs.items():
        values = concrete_inputs(model, x)
        entry: dict[str, Any] = {"mode": mode.value if mode else None, "inputs": values}
        if mode is not None:
            query = query_from(mode, values)
            if query is not None:
                entry["command"] = command_for(query)
        out[name] = entry
    for name, s in ob.shown.states.items():
        # Only non-zero counters: a counterexample-to-induction state is mostly zeros.
        out[name] = {k: v for k, t in s.terms().items() if (v := as_int(model, t)) != 0}
    for name, term in ob.shown.terms.items():
        out[name] = as_bool(model, term) if z3.is_bool(term) else as_int(model, term)
    return out


def format_witness(w: dict[str, Any], indent: str = "    ") -> list[str]:
    """Readable lines for a witness or counterexample-to-induction."""
    lines: list[str] = []
    for key, value in w.items():
        if isinstance(value, dict):
            if "command" in value:
                lines.append(f"{indent}{key}: {value['command']}")
                extra = {k: v for k, v in value.items() if k not in ("command", "mode")}
                for k2, v2 in extra.items():
                    lines.append(f"{indent}  {k2}: {_flat(v2)}")
            else:
                lines.append(f"{indent}{key}: {_flat(value)}")
        else:
            lines.append(f"{indent}{key}: {value}")
    return lines


def _flat(value: Any) -> str:
    if isinstance(value, dict):
        if value and all(isinstance(v, dict) for v in value.values()):
            return "; ".join(f"{k}: {_flat(v)}" for k, v in value.items())
        return ", ".join(f"{k}={_flat(v)}" for k, v in value.items()) or "(all zero)"
    return str(value)
