"""The one error type users see.

Every problem caused by the user's input or environment is raised as a ``WmlError`` with a
one-line message.  The CLI prints ``wml: error: <message>`` and exits with ``exit_code``;
anything else that escapes is a bug in wml and is shown as such.
"""
from __future__ import annotations

import sys
from typing import Callable, NoReturn, Optional


class WmlError(Exception):
    """A user-facing error: one line, no traceback."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        # Keep the message on one line whatever the caller passed.
        super().__init__(" ".join(str(message).split()))
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self)


def run_main(prog: str, body: Callable[[], Optional[int]]) -> NoReturn:
    """Run a command-line entry point: a WmlError becomes ``<prog>: error: <message>`` and its
    exit code, Ctrl-C exits 130, anything else is a wml bug and keeps its traceback."""
    try:
        code = body()
    except WmlError as e:
        sys.stderr.write(f"{prog}: error: {e}\n")
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        sys.exit(130)
    sys.exit(code or 0)
