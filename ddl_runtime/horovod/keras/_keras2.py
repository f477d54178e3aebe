"""What Horovod's (Keras 2) scripts use and Keras 3 removed: one line naming the Keras 3 spelling.

Used by DistributedOptimizer (an optimizer that is not a Keras 3 one) and by the distributed
optimizer's attribute lookup (``opt.lr``, ``opt.get_gradients(...)``).  The full list, including
what Keras 3 itself refuses before any Horovod code runs (``SGD(lr=...)``,
``tf.keras.optimizers.legacy``, ``compile(experimental_run_tf_function=False)``), is in README's
"From Horovod to wml".
"""
from __future__ import annotations

from typing import Any

from ddl_runtime.errors import DDLInputError

__all__ = ["REMOVED_ATTRIBUTES", "removed_attribute", "not_a_keras3_optimizer"]

# Keras 2 optimizer attribute -> its Keras 3 spelling
REMOVED_ATTRIBUTES = {
    "lr": "optimizer.learning_rate (read it with float(optimizer.learning_rate), set it with "
          "optimizer.learning_rate = value)",
    "get_gradients": "tf.GradientTape with hvd.DistributedGradientTape (custom loops) or model.fit "
                     "(DistributedOptimizer reduces the gradients in optimizer.apply)",
    "get_updates": "optimizer.apply(grads, variables) (model.fit calls it)",
    "minimize": "tf.GradientTape with hvd.DistributedGradientTape, then optimizer.apply_gradients",
}

# TensorFlow 1 optimizer classes -> the Keras 3 optimizer
_TF1_NAMES = {
    "GradientDescentOptimizer": "SGD", "MomentumOptimizer": "SGD(momentum=...)", "AdamOptimizer": "Adam",
    "AdagradOptimizer": "Adagrad", "RMSPropOptimizer": "RMSprop", "AdadeltaOptimizer": "Adadelta",
    "FtrlOptimizer": "Ftrl",
}


class RemovedInKeras3Error(DDLInputError, AttributeError):
    """A Keras 2 attribute Keras 3 no longer has (an AttributeError, so hasattr() stays False)."""


def removed_attribute(optimizer: Any, name: str) -> RemovedInKeras3Error:
    return RemovedInKeras3Error(f"{type(optimizer).__name__}.{name} does not exist in Keras 3; use "
                                f"{REMOVED_ATTRIBUTES[name]}")


def not_a_keras3_optimizer(optimizer: Any, who: str) -> DDLInputError:
    """The error for an optimizer that is not a ``keras.optimizers.Optimizer`` (Keras 3)."""
    cls = type(optimizer).__name__
    module = type(optimizer).__module__ or ""
    if isinstance(optimizer, type):
        return DDLInputError(f"{who}: got the class {optimizer.__name__}, not an optimizer; pass an instance, "
                             f"e.g. keras.optimizers.{optimizer.__name__}(learning_rate=0.01)")
    if cls in _TF1_NAMES:
        spelling = _TF1_NAMES[cls]
    elif "legacy" in module or module.startswith("tf_keras") or module.startswith("keras.optimizers"):
        spelling = cls  # tf_keras / Keras 2 (legacy) optimizer: Keras 3 has the same name
    else:
        return DDLInputError(f"{who}: optimizer is a {cls} ({module}), not a keras.optimizers.Optimizer (Keras 3)")
    name, _, args = spelling.partition("(")
    args = ("learning_rate=..., " + args[:-1]) if args else "learning_rate=..."
    return DDLInputError(f"{who}: {cls} ({module}) is a Keras 2 / TensorFlow 1 optimizer, which Keras 3 removed; "
                         f"use keras.optimizers.{name}({args})")
