"""Named Horovod collectives appear in the Chrome trace (DDL_TIMELINE) with their tensor names."""
import torch

import ddl_runtime.horovod.torch as hvd

hvd.init()
hvd.allreduce(torch.ones(8), name="traced.weight")
hvd.allgather(torch.ones(2), name="traced.gather")
hvd.shutdown()
print("DONE", flush=True)
