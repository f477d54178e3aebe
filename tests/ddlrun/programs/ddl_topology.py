"""What ddl_runtime makes of the environment ddlrun gave this rank: one JSON line TOPO {...}."""
import json
import os

import numpy as np

import ddl_runtime as ddl

ddl.init()
total = ddl.allreduce(np.array([float(ddl.rank())]), op="sum")
print("TOPO " + json.dumps({
    "rank": ddl.rank(), "size": ddl.size(), "RANK": int(os.environ["RANK"]),
    "local_rank": ddl.local_rank(), "local_size": ddl.local_size(),
    "cross_rank": ddl.cross_rank(), "cross_size": ddl.cross_size(),
    "gpu": ddl.local_gpuid(), "sum": float(np.asarray(total).ravel()[0]),
}), flush=True)
ddl.finalize()
