"""One-line diagnostics on stderr, prefixed with the rank so interleaved output stays readable."""
import sys

_prefix = "ddl_runtime"


def set_rank(rank: int, size: int) -> None:
    global _prefix
    _prefix = f"ddl_runtime: rank {rank}/{size}"


def log(message: str, before: str = "") -> None:
    """Write `before` (e.g. a traceback) and the message in one write, so they arrive together."""
    sys.stderr.write(f"{before}{_prefix}: {message}\n")
    sys.stderr.flush()
