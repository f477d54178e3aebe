"""An Adasum exchange waiting on a peer that is busy elsewhere names it, then completes (2 ranks;
run with DDL_STALL_WARNING_S=1)."""
import time

import torch

import ddl_runtime.horovod.torch as hvd

from checks import done, report

hvd.init()
R = hvd.rank()
x = torch.tensor([1.0, 0.0]) if R == 0 else torch.tensor([0.0, 2.0])
if R == 1:
    h = hvd.allreduce_async(x, op=hvd.Adasum, name="slow")
    time.sleep(3)  # away from Horovod: the request's round and exchange wait for this rank
    out = hvd.synchronize(h)
else:
    out = hvd.allreduce(x, op=hvd.Adasum, name="slow")
report("stalled_adasum_completes", torch.equal(out, torch.tensor([1.0, 2.0])), str(out))
done()
