"""Where a command writes an output file (report, HTML page, state): atomically when it can, directly
when it must.

A regular file or a new path is written to a temp file beside it and renamed over it (a crash
leaves the old file or the new one). ``-`` (standard output), a device such as ``/dev/null`` or a
FIFO is written in place: renaming over it would replace it with a regular file (issue 18:
``replay --report /dev/null`` run as root replaced ``/dev/null``). A symlink's target is replaced,
the link kept.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from agent.engine.state import write_atomic

STDOUT = "-"


def writes_in_place(path: Path | str) -> bool:
    """True when ``path`` must be written directly: ``-``, or an existing non-regular file."""
    if str(path) == STDOUT:
        return True
    try:
        mode = os.stat(path).st_mode  # follows symlinks: the target's kind decides
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode)


@contextlib.contextmanager
def open_text_output(path: Path | str) -> Iterator[TextIO]:
    """A text stream onto ``path``; for a regular file it is renamed into place only when the
    ``with`` block ends without an error (otherwise the temp file is removed, the old file kept)."""
    if str(path) == STDOUT:
        yield sys.stdout
        sys.stdout.flush()
        return
    if writes_in_place(path):
        with open(path, "w", encoding="utf-8") as out:
            yield out
        return
    target = Path(os.path.realpath(path))  # a symlink's target: the link itself survives
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_output(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` under the same rule (atomic for regular files and new paths)."""
    if str(path) == STDOUT:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    elif writes_in_place(path):
        with open(path, "wb") as out:
            out.write(data)
    else:
        write_atomic(Path(os.path.realpath(path)), data)
