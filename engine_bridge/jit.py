"""numba, loaded once per process and only when a compiled kernel is first wanted.

The compiled kernels of the columnar checker (colscan.py: the byte scanner; colkeys.py: the
shape table's keys and slots) are plain Python functions in their modules. `compile_kernels`
swaps each for numba's machine code in its module's globals (numba resolves the calls
between kernel functions by global name); the module keeps the sources, which the tests run
as plain Python against the compiled code. ``cache=True``: the machine code is cached beside
the module, so only a machine's first run pays the compile (about 0.7-0.9 s of CPU and 60 MB
per process remain for importing numba and loading the cache). Where numba cannot be
imported, the callers use their numpy or typed-decoder paths: slower, exactly as exact.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

_compiled: dict[str, bool] = {}  # module name -> the first call's answer


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
