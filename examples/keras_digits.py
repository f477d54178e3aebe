#!/usr/bin/env python
"""The WML CE DDL Keras example, on scikit-learn's digits with Keras 3 (torch backend, CPU).

Written like the tf.keras MNIST example from IBM's DDL material: the lines marked ``> DDL``
are the only changes from a single-process script (import ddl, split the data with
``np.array_split(x, ddl.size())[ddl.rank()]``, scale the learning rate by ``ddl.size()``,
add ``DDLCallback`` first and ``DDLGlobalVariablesCallback`` last)::

    python examples/keras_digits.py
    mpiexec -n 2 python examples/keras_digits.py
    ddlrun -n 2 python examples/keras_digits.py

At the end every rank checks that all ranks hold identical weights (exit status 1 if not).

Resumable across jobs (the line marked ``> walltime``): under ``wml submit --chain N`` a run
stopped a margin before the walltime saves, exits 75 and goes on in the next job, ending with
the weights one long job would have; outside a chain the callback does nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")  # Keras 3 on PyTorch: no TensorFlow needed

import numpy as np  # noqa: E402
import torch  # noqa: E402

import keras  # noqa: E402
from keras import layers  # noqa: E402

try:  # > DDL: the WML CE compatibility module, when installed with wml
    import ddl  # noqa: E402
except ImportError:  # the runtime's Keras module has the same names
    import ddl_runtime.keras as ddl  # noqa: E402

import ddl_runtime.keras as ddl_keras  # noqa: E402  (only for the final weight check)

num_classes = 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.02, help="single-rank learning rate; scaled by ddl.size()")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--target", type=float, default=0.95, help="test accuracy to reach (exit 3 below; 0 disables)")
    p.add_argument("--json", default=None, help="rank 0 writes the results here as JSON")
    return p.parse_args(argv)


def load_digits_split(split_seed: int = 0):
    import gzip
    import importlib.util

    # The CSV that ships inside scikit-learn, read directly (sklearn.datasets takes ~2 s to import).
    spec = importlib.util.find_spec("sklearn")
    path = os.path.join(list(spec.submodule_search_locations)[0], "datasets", "data", "digits.csv.gz") if spec else ""
    if path and os.path.exists(path):
        with gzip.open(path, "rt") as fh:
            data = np.loadtxt(fh, delimiter=",")
        images, labels = data[:, :-1].reshape(-1, 8, 8), data[:, -1]
    else:
        from sklearn.datasets import load_digits

        digits = load_digits()
        images, labels = digits.images, digits.target
    x = images.astype("float32")[..., None] / 16.0  # (n, 8, 8, 1), channels last
    y = labels.astype("int64")
    order = np.random.RandomState(split_seed).permutation(len(y))
    n_test = int(round(len(y) * 0.2))
    return x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]]


def build_model() -> keras.Model:
    return keras.Sequential([
        keras.Input(shape=(8, 8, 1)),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(64, activation="relu"),
        layers.Dense(num_classes, activation="softmax"),
    ])


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(max(1, args.threads))

    x_train, y_train, x_test, y_test = load_digits_split()

    # > DDL: Save the full test data before splitting for the final accuracy check.
    x_test_full = x_test
    y_test_full = keras.utils.to_categorical(y_test, num_classes)

    # > DDL: Split the training & testing data.
    x_train = np.array_split(x_train, ddl.size())[ddl.rank()]
    x_test = np.array_split(x_test, ddl.size())[ddl.rank()]
    y_train = np.array_split(y_train, ddl.size())[ddl.rank()]
    y_test = np.array_split(y_test, ddl.size())[ddl.rank()]
    y_train = keras.utils.to_categorical(y_train, num_classes)
    y_test = keras.utils.to_categorical(y_test, num_classes)
    if ddl.rank() == 0:
        print("x_train shape:", x_train.shape, flush=True)
        print(x_train.shape[0], "train samples per rank,", x_test.shape[0], "test samples per rank", flush=True)

    # Different initial weights on each rank on purpose: DDLGlobalVariablesCallback fixes that.
    keras.utils.set_random_seed(args.seed + 1000 * ddl.rank())
    model = build_model()

    # > DDL: adjust the learning rate based on the number of learners.
    model.compile(loss=keras.losses.categorical_crossentropy,
                  optimizer=keras.optimizers.SGD(learning_rate=args.lr * ddl.size(), momentum=0.9),
                  metrics=["accuracy"])

    callbacks = list()
    # > DDL: Add the DDL callback (first).
    callbacks.append(ddl.DDLCallback())
    # > walltime: save before the walltime, resume in the next job of a chain (mid-epoch included).
    callbacks.append(ddl.WalltimeCheckpoint())
    # > DDL: Add the global variables callback (last).
    callbacks.append(ddl.DDLGlobalVariablesCallback())

    history = model.fit(x_train, y_train,
                        batch_size=args.batch_size,
                        epochs=args.epochs,
                        shuffle=True,
                        verbose=2 if ddl.rank() == 0 else 0,  # one line per epoch from rank 0
                        validation_data=(x_test, y_test),
                        callbacks=callbacks)

    # Every rank scores the full test set; the weights are the same everywhere.
    score = model.evaluate(x_test_full, y_test_full, verbose=0)
    divergence = ddl_keras.weights_max_divergence(model)
    identical = divergence == 0.0
    if ddl.rank() == 0:
        print("Test loss:", round(float(score[0]), 4), flush=True)
        print("Test accuracy:", round(float(score[1]), 4), flush=True)
        if identical:
            print(f"all {ddl.size()} rank(s) hold identical weights", flush=True)
        else:
            print(f"ERROR: weights differ across ranks (max difference {divergence:g})", flush=True)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"ranks": ddl.size(), "test_accuracy": float(score[1]), "identical": identical,
                           "max_divergence": divergence,
                           "history": {k: [float(x) for x in v] for k, v in history.history.items()}}, fh, indent=1)
    if not identical:
        return 1
    if args.target and float(score[1]) < args.target:
        if ddl.rank() == 0:
            print(f"ERROR: test accuracy {float(score[1]):.4f} is below the target {args.target}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
