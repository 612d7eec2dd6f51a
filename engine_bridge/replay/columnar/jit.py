"""numba, loaded once per process and only when a compiled kernel is first wanted.

The compiled kernels of the columnar checker (scanner.py: the byte scanner; hashing.py: the
shape table's keys and slots) are plain Python functions in their modules. `compile_kernels`
swaps each for numba's machine code in its module's globals (numba resolves the calls
between kernel functions by global name); the module keeps the sources, which the tests run
as plain Python against the compiled code. ``cache=True``: the machine code is cached beside
the module, so only a machine's first run pays the compile (about 0.7-0.9 s of CPU and 60 MB
per process remain for importing numba and loading the cache). Where numba cannot be
imported, the callers use their numpy or typed-decoder paths: slower, exactly as exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

_compiled: dict[str, bool] = {}  # module name -> the first call's answer
_allowed = [True]  # False: numba is not imported now (a log too small to repay it)


@contextmanager
def allowed(yes: bool) -> Iterator[None]:
    """Within the block, `compile_kernels` imports numba only if ``yes``; kernels compiled
    earlier in the process stay in use (their price is paid). Without, a module's callers
    take their numpy or typed-decoder paths, exactly as exact."""
    before = _allowed[0]
    _allowed[0] = yes
    try:
        yield
    finally:
        _allowed[0] = before


def compile_kernels(
    space: MutableMapping[str, Any],
    sources: Mapping[str, Callable[..., Any]],
    kernels: tuple[str, ...],
    inlined: tuple[str, ...] = (),
) -> bool:
    """Put numba's compiled versions of ``sources[name]`` into ``space`` (a module's
    globals) for every name of ``inlined`` (helpers inlined into their callers) and
    ``kernels``, once per module (``space["__name__"]``: later calls return the first
    answer); False (``space`` unchanged) where numba cannot be imported."""
    name = space["__name__"]
    if name not in _compiled:
        if not _allowed[0]:
            return False  # not decided: a later, larger log may still compile
        _compiled[name] = _compile(space, sources, kernels, inlined)
    return _compiled[name]


def loaded(name: str) -> bool:
    """Whether the kernels of module ``name`` are compiled in this process already."""
    return _compiled.get(name, False)


def _compile(
    space: MutableMapping[str, Any],
    sources: Mapping[str, Callable[..., Any]],
    kernels: tuple[str, ...],
    inlined: tuple[str, ...],
) -> bool:
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency of spectally[bridge]
        return False
    for name in inlined:
        space[name] = numba.njit(cache=True, inline="always")(sources[name])
    for name in kernels:
        space[name] = numba.njit(cache=True, nogil=True)(sources[name])
    return True
