"""The source of vLLM's spec-decoding counting paths, extracted and hashed per release.

The replay's ``vllm-legacy`` profile models what vLLM 0.32.0 counts. Whether a later release
counts the same is decided by comparing the source of the functions that count (issue 12 item 3):

* ``Scheduler.make_spec_decoding_stats``, ``Scheduler.update_draft_token_ids``,
  ``Scheduler.update_draft_token_ids_in_output`` (v1/core/sched/scheduler.py);
* the spec-decoding block of ``Scheduler.update_from_output`` (the ``if scheduled_spec_token_ids
  ...`` statement that calls ``make_spec_decoding_stats``) and its stale-output skip (the ``if``
  that tests ``drop_stale_output``);
* the statements of ``Scheduler._preempt_request`` that drop a waiting proposal
  (``spec_token_ids``) or mark in-flight output stale (``drop_stale_output``,
  ``num_stale_output_tokens``);
* ``SpecDecodingStats`` (v1/spec_decode/metrics.py), whose fields are the exported counters;
* for context, not deciding the profile: ``_update_request_with_output`` of ``Scheduler`` and
  ``AsyncScheduler`` (how sampled tokens are appended: what the recorder's ``delivered`` sees).

Each is located with ``ast`` (by class and function name, so line shifts do not matter) and
hashed (SHA-256 of the exact source text). ``counting_source.json`` (next to this module) pins
the hashes per release, with the 0.32.0 text, so that the next release's changes are found, not
assumed::

    python -m spectally.engine_bridge.vllm.counting_source WHEEL_OR_SITE_PACKAGES [--version V]
        # prints each function's hash and whether it equals the pinned 0.32.0 one; exit 1 if not
    python -m spectally.engine_bridge.vllm.counting_source --pin WHEEL...   # rewrite the pin

Standard library only (a wheel is a zip file).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

PIN = Path(__file__).with_name("counting_source.json")
BASELINE = "0.32.0"

SCHEDULER = "vllm/v1/core/sched/scheduler.py"
ASYNC_SCHEDULER = "vllm/v1/core/sched/async_scheduler.py"
METRICS = "vllm/v1/spec_decode/metrics.py"

# name -> (file, class, function or None for the whole class, statement selector or None); a
# counting target must exist, a delivery target may be absent (recorded as "absent").
TARGETS: dict[str, tuple[str, str, str | None, str | None]] = {
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
COUNTING = tuple(name for name in TARGETS if name not in DELIVERY)
ABSENT = "absent"


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


def _find_function(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise LookupError(f"{cls.name}.{name} not found")


def _innermost_if(func: ast.FunctionDef, text: str, needle: str) -> ast.AST:
    """The smallest ``if`` statement of ``func`` whose source contains ``needle``."""
    best: ast.AST | None = None
    best_len = 1 << 62
    for node in ast.walk(func):
        if isinstance(node, ast.If):
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
        if rel not in cache:
            text = source.read(rel)
            cache[rel] = (text, ast.parse(text))
        text, tree = cache[rel]
        try:
            cls = _find_class(tree, cls_name)
            node: ast.AST = cls
            if func_name is not None:
                func = _find_function(cls, func_name)
                if needle is not None and needle.startswith("stmts:"):
                    out[name] = _statements(func, text, needle.removeprefix("stmts:").split("|"))
                    continue
                node = func if needle is None else _innermost_if(func, text, needle)
        except LookupError:
            if name in DELIVERY:
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


def load_pin(path: Path = PIN) -> dict[str, Any]:
    pin: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return pin


def compare(
    found: dict[str, str | None], pin: dict[str, Any], version: str = BASELINE
) -> list[str]:
    """Targets whose hash differs from the pinned one of ``version``."""
    pinned = pin["releases"][version]
    return [name for name in TARGETS if digest(found[name]) != pinned.get(name)]


def same_counting(changed: list[str]) -> bool:
    """The counting targets are all unchanged (delivery-only changes do not count)."""
    return not any(name in COUNTING for name in changed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("sources", nargs="+", type=Path, help="vLLM wheel(s) or site-packages dir(s)")
    ap.add_argument("--pin", action="store_true", help=f"rewrite {PIN.name} from the sources")
    args = ap.parse_args(argv)
    pin = load_pin() if PIN.exists() else {"releases": {}, "text": {}}
    worst = 0
    for path in args.sources:
        source = Source(path)
        version = source.version() or path.name
        found = extract(source)
        if args.pin:
            pin["releases"][version] = {name: digest(text) for name, text in found.items()}
            if version == BASELINE:
                pin["text"] = {name: text for name, text in found.items() if text is not None}
            continue
        changed = compare(found, pin)
        for name in TARGETS:
            mark = "CHANGED" if name in changed else "same"
            kind = "delivery" if name in DELIVERY else "counting"
            print(f"{version}  {mark:<7}  {kind:<8}  {digest(found[name])[:16]}  {name}")
        if not same_counting(changed):
            print(f"{version}: counting source differs from {BASELINE}: a new profile is needed")
            worst = 1
        else:
            print(f"{version}: counting source identical to {BASELINE} (vllm-legacy applies)")
    if args.pin:
        pin["baseline"] = BASELINE
        pin["targets"] = {n: list(t) for n, t in TARGETS.items()}
        PIN.write_text(json.dumps(pin, indent=1, sort_keys=True) + "\n")
        print(f"wrote {PIN}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
