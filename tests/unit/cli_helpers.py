"""Running the gx10 command in-process and capturing what it prints."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

from gx10.cli import main


@dataclass(frozen=True)
class Invocation:
    code: int
    stdout: str
    stderr: str


def invoke(argv: list[str]) -> Invocation:
    """`gx10 <argv>`: its exit code and its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return Invocation(code, out.getvalue(), err.getvalue())
