"""The one way every command writes a file: never over one of its inputs, never half.

- `check_outputs` compares every output path with every input before anything is read: the
  same file (device and inode, symlinks followed) or, for an output that does not exist yet,
  the same resolved path, is refused; so is an output whose folder is missing or is not a
  folder, an output that is a folder (or ends in a separator), or an empty path. Each refusal
  is a `BadInput` naming the output (exit 2).
- `write_output` writes the whole text to a temporary file in the target's folder and renames
  it into place only when every byte is on disk, so a failure (a full disk, an unwritable
  folder) leaves the target as it was, never a truncated file. A target that is not a regular
  file (``/dev/stdout``, a pipe, ``/dev/full``) is written in place: renaming over a device
  would replace it. Every `OSError` is a `BadInput` naming the target.

Standard library only; it imports nothing of the bridge but `source`'s `BadInput`, so every
command (the root ``spectally`` package's included) can use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable

from .source import BadInput


def _refuse(path: str, reason: str) -> BadInput:
    return BadInput(path, 1, 1, reason)


def _same_file(out: str, inp: str) -> bool:
    """Whether writing ``out`` would write ``inp``: the same device and inode when both exist
    (through every symlink), else the same resolved path."""
    try:
        a, b = os.stat(out), os.stat(inp)
    except OSError:
        return os.path.realpath(out) == os.path.realpath(inp)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check_outputs(
    outputs: Iterable[tuple[str, str | None]],
    inputs: Iterable[tuple[str, str | None]],
    *,
    folders_made: bool = False,
) -> None:
    """Refuse (`BadInput`) any output that is one of the inputs, or one that cannot be a file.

    ``outputs`` and ``inputs`` are ``(what, path)`` pairs, ``what`` naming the option in the
    message (``--out``, ``--html``, ``LOG``); a ``None`` path or ``-`` (stdout, stdin) is
    skipped. Two outputs that are one file are refused too. ``folders_made``: the caller
    makes the outputs' folder itself (`check_output_dir` checked it), so it may not exist yet."""
    ins = [(what, p) for what, p in inputs if p is not None and p != "-"]
    outs = [(what, p) for what, p in outputs if p is not None and p != "-"]
    for i, (what, out) in enumerate(outs):
        for in_what, inp in ins:
            if _same_file(out, inp):
                raise _refuse(
                    out,
                    f"{what} is an input of this command ({in_what} {inp!r}): refused, writing"
                    " it would destroy the input (name another file)",
                )
        for other_what, other in outs[:i]:
            if _same_file(out, other):
                raise _refuse(out, f"{what} is also {other_what}: name two different files")
        if not folders_made:
            _check_target(what, out)


def _empty(what: str, out: str) -> None:
    """An empty path names no file: the folder above the working one would be its "folder"."""
    if not out:
        raise _refuse("''", f"{what} is an empty path: name a file")


def _check_target(what: str, out: str) -> None:
    """An output whose folder exists and which is not itself a folder."""
    _empty(what, out)
    if out.endswith(os.sep) or (os.altsep is not None and out.endswith(os.altsep)):
        raise _refuse(out, f"{what} ends in {out[-1]!r}: it names a folder, not a file")
    if os.path.isdir(out):
        raise _refuse(out, f"{what} is a directory, not a file")
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        reason = "does not exist" if not os.path.exists(folder) else "is not a directory"
        raise _refuse(out, f"cannot write {what}: its directory {folder!r} {reason}")


def check_output_dir(what: str, out_dir: str) -> None:
    """A folder to write files into: it exists as a folder, or its parent does (it is made)."""
    _empty(what, out_dir)
    if os.path.isdir(out_dir):
        return
    if os.path.exists(out_dir):
        raise _refuse(out_dir, f"cannot write {what}: not a directory")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise _refuse(out_dir, f"cannot write {what}: its parent {parent!r} does not exist")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_output(path: str, text: str | bytes) -> None:
    """Write ``text`` (str: as UTF-8) to ``path`` whole or not at all (module docstring)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _refuse(path, f"cannot write: {exc.strerror or exc}") from None
    data = text.encode("utf-8") if isinstance(text, str) else text
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_in_place(path, data)
        return
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(
            dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".partial"
        )
    except OSError as exc:
        raise _refuse(path, f"cannot write: {exc.strerror or exc}") from None
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        done = True
    except OSError as exc:
        raise _refuse(path, f"cannot write: {exc.strerror or exc}") from None
    finally:
        if not done:  # a failure or an interrupt: nothing half-written stays behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _write_in_place(path: str, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
    except OSError as exc:
        raise _refuse(path, f"cannot write: {exc.strerror or exc}") from None
