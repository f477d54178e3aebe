"""``horovod.tensorflow.keras.callbacks``: the Keras 3 callbacks of :mod:`ddl_runtime.horovod.keras.callbacks`."""
from ddl_runtime.horovod.keras.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
    WalltimeCheckpointCallback,
)
