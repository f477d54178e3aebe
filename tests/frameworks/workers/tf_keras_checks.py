"""Run under `ddlrun -n 2` with KERAS_BACKEND=tensorflow: model.fit with the DDL callbacks.

Each rank fits on its half of every global batch (different initial weights per rank, Adam,
whose variables Keras creates lazily, and jit_compile=True, which the DDL callback must turn
off); rank 0 also fits a plain copy on the whole data with the global batch.  Then a misuse
case.  Each rank writes <out>/rank<R>.npz; the test judges.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import keras  # noqa: E402
from keras import layers  # noqa: E402

import ddl  # noqa: E402  (the WML CE compatibility module)
import ddl_runtime  # noqa: E402

out_dir = sys.argv[1]
B_RANK, STEPS = 16, 6


def build(hidden=16):
    return keras.Sequential([keras.Input(shape=(6,)), layers.Dense(hidden, activation="tanh", name="hidden"),
                             layers.Dense(3, activation="softmax", name="out")])


def flat(values):
    return np.concatenate([np.asarray(w, dtype=np.float64).reshape(-1) for w in values])


rank, size = ddl.rank(), ddl.size()
B = B_RANK * size
rng = np.random.RandomState(0)
n = B * STEPS
x = rng.rand(n, 6).astype("float32")
y = keras.utils.to_categorical(rng.randint(0, 3, size=n), 3)
rows = np.concatenate([np.arange(k * B + rank * B_RANK, k * B + (rank + 1) * B_RANK) for k in range(STEPS)])

keras.utils.set_random_seed(7 + rank)  # different starts: DDLGlobalVariablesCallback must fix that
model = build()
start_mine = flat(model.get_weights())
model.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(learning_rate=0.05),
              metrics=["accuracy"], jit_compile=True)
hist = model.fit(x[rows], y[rows], batch_size=B_RANK, epochs=2, shuffle=False, verbose=0,
                 callbacks=[ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()])
result = {
    "backend": np.array(keras.backend.backend()),
    "jit_after": np.array(bool(model.jit_compile)),
    "start_mine": start_mine,
    "own": flat(model.get_weights()),
    "opt": flat([v.numpy() for v in model.optimizer.variables]),
    "losses": np.array(hist.history["loss"]),
    "divergence": np.array(ddl.weights_max_divergence(model)),
}
if rank == 0:
    keras.utils.set_random_seed(7)
    ref = build()
    result["start"] = flat(ref.get_weights())
    ref.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.Adam(learning_rate=0.05))
    ref.fit(x, y, batch_size=B, epochs=2, shuffle=False, verbose=0)
    result["ref"] = flat(ref.get_weights())

# misuse: ranks whose models differ get a DDLMismatchError naming the variable, on every rank
try:
    bad = build(8 if rank == 0 else 6)
    bad.compile(loss="categorical_crossentropy", optimizer=keras.optimizers.SGD(0.1))
    bad.fit(x[:32], y[:32], batch_size=8, epochs=1, verbose=0,
            callbacks=[ddl.DDLCallback(), ddl.DDLGlobalVariablesCallback()])
    result["mismatch"] = np.array("no error")
except ddl_runtime.DDLError as exc:
    result["mismatch"] = np.array(f"{type(exc).__name__}: {exc}")
np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **result)
print(f"rank {rank}: done", flush=True)
