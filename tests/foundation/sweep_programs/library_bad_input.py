"""Bad input to ddl_runtime's TensorFlow API and to horovod.torch, from a user's script under
``ddlrun -n 2``.  ddl_runtime is a library: it raises; each case must raise DDLInputError
(a ValueError) with a one-line message, on every rank, without communicating (so no rank hangs
waiting for another).  Prints one ``CASE <name> <ErrorType> <message>`` line per case and
``DONE`` after a final collective that proves the ranks still agree."""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def case(name, fn):
    try:
        fn()
    except Exception as e:  # the test reads the type and the message
        msg = str(e)
        print(f"CASE {name} {type(e).__name__} lines={len(msg.splitlines())} {msg.splitlines()[0] if msg else ''}",
              flush=True)
    else:
        print(f"CASE {name} NO-ERROR", flush=True)


which = sys.argv[1]
if which == "tf":
    import tensorflow as tf

    import ddl_runtime.tensorflow as ddl

    case("tf_before_init", lambda: ddl.allreduce(tf.ones([2])))
    ddl.init()
    case("tf_non_tensor", lambda: ddl.allreduce("abc"))
    case("tf_ragged_list", lambda: ddl.allreduce_n([[1.0, 2.0], [3.0]]))
    case("tf_string", lambda: ddl.allreduce(tf.constant(["a", "b"])))
    case("tf_complex64", lambda: ddl.allreduce(tf.constant([1 + 2j], dtype=tf.complex64)))
    case("tf_bool", lambda: ddl.allreduce(tf.constant([True, False])))
    case("tf_bcast_string", lambda: ddl.bcast(tf.constant(["a"])))
    case("tf_allgather_string", lambda: ddl.allgather(tf.constant(["a"])))
    out = ddl.allreduce(tf.ones([3]))
    print("DONE", float(tf.reduce_sum(out)), flush=True)
else:
    import torch

    import horovod.torch as hvd

    case("hvd_before_init", lambda: hvd.allreduce(torch.ones(2)))
    hvd.init()
    case("hvd_adasum", lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum))
    case("hvd_bad_op", lambda: hvd.allreduce(torch.ones(2), op=42))
    case("hvd_non_tensor", lambda: hvd.allreduce([1.0, 2.0]))
    i32 = torch.int32
    case("hvd_alltoall_splits_sum", lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([1, 1], dtype=i32)))
    case("hvd_alltoall_splits_neg", lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([5, -1], dtype=i32)))
    case("hvd_alltoall_splits_len", lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([4], dtype=i32)))
    case("hvd_alltoall_splits_list", lambda: hvd.alltoall(torch.ones(4), splits=["a", "b"]))
    case("hvd_alltoall_splits_float", lambda: hvd.alltoall(torch.ones(4), splits=torch.tensor([2.0, 2.0])))
    case("hvd_broadcast_root_high", lambda: hvd.broadcast(torch.ones(2), root_rank=2))
    case("hvd_broadcast_root_neg", lambda: hvd.broadcast(torch.ones(2), root_rank=-1))
    case("hvd_process_set_dup", lambda: hvd.add_process_set([0, 0]))
    case("hvd_process_set_range", lambda: hvd.add_process_set([0, 5]))
    case("hvd_process_set_str", lambda: hvd.add_process_set(["a"]))
    case("hvd_process_set_empty", lambda: hvd.add_process_set([]))
    out = hvd.allreduce(torch.ones(3), op=hvd.Sum)
    print("DONE", float(out.sum()), flush=True)
