"""Run under mpiexec -n 2: Keras misuse must raise the same clear DDLError on every rank.

Prints `CASE <name>: <ErrorType>: <message>` from rank 0 per case; `--uncaught` lets the
last case's error escape so the job must end with a non-zero exit.
"""
import argparse
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402

import keras  # noqa: E402
from keras import layers  # noqa: E402

import ddl  # noqa: E402
from ddl_runtime.errors import DDLError  # noqa: E402


def model_with(units):
    m = keras.Sequential([keras.Input(shape=(4,)), layers.Dense(units, activation="relu", name="hidden"),
                          layers.Dense(3, activation="softmax", name="out")])
    m.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.SGD(0.1))
    return m


def data(n):
    rng = np.random.RandomState(ddl.rank())
    return rng.rand(n, 4).astype("float32"), keras.utils.to_categorical(rng.randint(0, 3, n), 3)


def case_weight_shape(rank):
    x, y = data(32)
    model_with(8 if rank == 0 else 6).fit(x, y, batch_size=8, epochs=1, verbose=0,
                                          callbacks=[ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()])


def case_steps(rank):
    x, y = data(32 if rank == 0 else 24)  # 4 batches of 8 against 3: the last allreduce would hang
    model_with(8).fit(x, y, batch_size=8, epochs=1, verbose=0,
                      callbacks=[ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()])


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def run_cases(cases, uncaught):
    rank = ddl.rank()
    for i, name in enumerate(cases):
        keras.utils.set_random_seed(0)
        try:
            CASES[name](rank)
        except DDLError as exc:
            if rank == 0:
                print(f"CASE {name}: {type(exc).__name__}: {exc}", flush=True)
            if i == len(cases) - 1 and uncaught:
                raise
            continue
        if rank == 0:
            print(f"CASE {name}: no error", flush=True)
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", choices=sorted(CASES))
    ap.add_argument("--uncaught", action="store_true")
    args = ap.parse_args()
    run_cases(args.cases, args.uncaught)


if __name__ == "__main__":
    main()
