"""Helpers for tf_programs whose checks are independent: `checker(after, around)` and `solo_sets(hvd)`.

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


def solo_sets(hvd):
    """hvd.init() on 2 ranks and one process set per rank: (this rank, [set [0], set [1]])."""
    hvd.init()
    assert hvd.size() == 2, hvd.size()
    return hvd.rank(), [hvd.add_process_set([0]), hvd.add_process_set([1])]
