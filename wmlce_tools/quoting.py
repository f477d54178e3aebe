"""The one place where text is escaped for a shell or checked for a scheduler directive.

- Program arguments, paths and values reach the job script through ``sh_quote`` /
  ``sh_join`` (POSIX single quoting), so the script runs exactly the given argv.
- Scheduler directives (``#BSUB``, ``#SBATCH``, ``#COBALT``) are read by the scheduler, not
  by bash, and not every scheduler honours quotes there: their values must match
  ``DIRECTIVE_SAFE`` and anything else is refused with the reason.
- Text in comments goes through ``comment`` so a newline can never end the comment.
"""
from __future__ import annotations

import re
import shlex
from typing import Iterable

from .errors import WmlError

DIRECTIVE_SAFE = re.compile(r"^[A-Za-z0-9_.,:/%+=@~-]+$")
NAME_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MODULE_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./+-]*$")


def sh_quote(text: str) -> str:
    return shlex.quote(str(text))


def sh_join(argv: Iterable[str]) -> str:
    return " ".join(sh_quote(a) for a in argv)


def comment(text: str) -> str:
    """Text safe inside a ``#`` comment line: control characters shown escaped."""
    return "".join(repr(ch)[1:-1] if (ord(ch) < 32 or ord(ch) == 127) else ch for ch in str(text))


def check_directive_value(option: str, value: str) -> str:
    if not DIRECTIVE_SAFE.match(value):
        bad = sorted({ch for ch in value if not DIRECTIVE_SAFE.match(ch)})
        shown = " ".join(repr(c) for c in bad)
        raise WmlError(f"{option} {value!r}: contains {shown}; scheduler directives allow only "
                       "letters, digits and _ . , : / % + = @ ~ -")
    return value


def check_job_name(name: str) -> str:
    if not NAME_SAFE.match(name):
        raise WmlError(f"job name {name!r}: use 1-128 letters, digits, '_', '.' or '-' "
                       "(it becomes a scheduler directive and a directory name)")
    return name


def check_module(name: str) -> str:
    if not MODULE_SAFE.match(name):
        raise WmlError(f"module {name!r}: not a module name (letters, digits, _ . / + -)")
    return name
