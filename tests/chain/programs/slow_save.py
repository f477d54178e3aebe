"""A run whose checkpoint save takes longer than the chain's signal margin (ddl_runtime.checkpoint
for real; one object in the state takes SAVE_S seconds to pickle).

    python slow_save.py SAVE_S

Each step takes 0.05 s; on the stop signal the ranks agree at the next step boundary and save.
"""
import sys
import time

import numpy as np

import ddl_runtime as ddl
from ddl_runtime import checkpoint


class Slow:
    """Pickling it takes ``seconds``: a checkpoint too big to write within the margin."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self):
        time.sleep(self.seconds)
        return (Slow, (self.seconds,))


def main() -> None:
    save_s = float(sys.argv[1])
    ddl.init()
    restored = checkpoint.load()
    start = 0 if restored is None else restored.step + 1
    print(f"rank {ddl.rank()}: starting at step {start}", flush=True)
    for step in range(start, 1_000_000):
        time.sleep(0.05)
        if checkpoint.agree(step):
            checkpoint.save({"w": np.zeros(2), "slow": Slow(save_s)}, step)
            checkpoint.exit_resume()
    ddl.finalize()


if __name__ == "__main__":
    main()
