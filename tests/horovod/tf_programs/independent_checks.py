"""`checker(after, around)`: a decorator factory for programs whose checks are independent.

``@check("what")`` runs the function at once (inside ``around()`` when given) and prints
``OK what`` or ``FAIL what: <error>`` (the traceback on stderr); ``after(what)`` then runs on
every rank, so the ranks leave each check together and the next one starts clean.
"""
import contextlib
import sys
import traceback


def checker(after, around=contextlib.nullcontext):
    def check(what):
        def run(fn):
            try:
                with around():
                    fn()
            except Exception as exc:  # noqa: BLE001 - reported, the next check runs
                print(f"FAIL {what}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                traceback.print_exc(file=sys.stderr)
            else:
                print(f"OK {what}", flush=True)
            after(what)
        return run
    return check
