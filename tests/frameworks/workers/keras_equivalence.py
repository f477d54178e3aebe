"""Run under mpiexec -n 2: model.fit with the DDL callbacks must equal one process with the global batch.

Each rank fits on its half of every global batch (batch b, no shuffling); rank 0 also fits a
plain copy (no callbacks) on the whole data with batch 2b.  Rank 0 writes --out.
"""
import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
from keras import layers  # noqa: E402

import ddl  # noqa: E402  (the WML CE compatibility module)
import ddl_runtime  # noqa: E402
import ddl_runtime.keras as ddl_keras  # noqa: E402


def build():
    return keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        layers.Conv2D(8, 3, padding="same", activation="relu"),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dense(10, activation="softmax"),
    ])


def flat(model):
    return np.concatenate([np.asarray(w, dtype=np.float64).reshape(-1) for w in model.get_weights()])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--then-bad-cases", nargs="*", default=[],
                    help="afterwards run these keras_bad_input.py cases in the same job (saves a launch)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rank, size = ddl.rank(), ddl.size()
    b, B = args.batch, args.batch * size
    rng = np.random.RandomState(0)
    n = B * args.steps
    x = rng.rand(n, 8, 8, 1).astype("float32")
    y = keras.utils.to_categorical(rng.randint(0, 10, size=n), 10)
    # Global batch k = rows [k*B, (k+1)*B); rank r takes its b rows of each.
    rows = np.concatenate([np.arange(k * B + rank * b, k * B + (rank + 1) * b) for k in range(args.steps)])

    keras.utils.set_random_seed(7 + rank)  # different starts: the callback must fix that
    model = build()
    model.compile(loss="categorical_crossentropy",
                  optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), metrics=["accuracy"])
    hist = model.fit(x[rows], y[rows], batch_size=b, epochs=2, shuffle=False, verbose=0,
                     callbacks=[ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()])

    own = np.asarray(ddl_runtime.allgather(flat(model)[None, :]))
    losses = np.asarray(ddl_runtime.allgather(np.array([hist.history["loss"]], dtype=np.float64)))
    if rank == 0:
        keras.utils.set_random_seed(7)
        ref = build()  # rank 0's initial weights, which the callback broadcast
        ref.compile(loss="categorical_crossentropy",
                    optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9))
        ref.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
        keras.utils.set_random_seed(7)
        start = flat(build())
        np.savez(args.out, own=own, ref=flat(ref), start=start, losses=losses, size=size)
    print(f"rank {rank}: done", flush=True)
    if args.then_bad_cases:
        import keras_bad_input

        keras_bad_input.run_cases(args.then_bad_cases, uncaught=False)


if __name__ == "__main__":
    main()
