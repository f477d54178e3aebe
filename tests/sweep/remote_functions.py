"""Functions the Python API sends to jobs in tests/sweep/test_sweep_local.py."""
import os


def scaled(x):
    if x < 0:
        raise ValueError(f"no negative values: {x}")
    return {"value": 2 * x, "rank": int(os.environ["RANK"]), "world": int(os.environ["WORLD_SIZE"])}


def square(x):
    return x * x


def quits(code):
    import sys

    sys.exit(code)


def lock(_):
    import threading

    return threading.Lock()


def nap(seconds):
    import time

    time.sleep(seconds)
    return seconds
