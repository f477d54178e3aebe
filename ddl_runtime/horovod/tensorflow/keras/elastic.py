"""``horovod.tensorflow.keras.elastic``: the Keras 3 elastic state and callbacks (see
ddl_runtime/horovod/keras/elastic.py), on the TensorFlow backend."""
from ddl_runtime.horovod.keras.elastic import *  # noqa: F401,F403
from ddl_runtime.horovod.keras.elastic import (CommitStateCallback, KerasState, ObjectState, State,  # noqa: F401
                                               UpdateBatchStateCallback, UpdateEpochStateCallback, run)
