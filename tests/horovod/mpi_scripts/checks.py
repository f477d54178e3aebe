"""The lines the MPI scripts in this folder print for the test that runs them: `OK name` or
`FAIL name: why` per check, `DONE` at the end, exit status 1 when any check failed."""
import sys

_failures = 0


def report(name: str, ok: bool, why: str = "") -> None:
    global _failures
    _failures += not ok
    print(f"OK {name}" if ok else f"FAIL {name}: {why}", flush=True)


def done() -> None:
    print("DONE", flush=True)
    sys.exit(1 if _failures else 0)
