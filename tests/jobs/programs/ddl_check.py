"""A small DDL program for end-to-end job tests: every rank reports who it is and checks one
fused, topology-aware allreduce against the exact answer.

Each rank prints one line ``DDLCHECK {json}`` with rank, size, local rank, local size, cross
rank (node index as the runtime sees it), the host, the launcher's own node variables and the
reduced values; rank 0 also prints ``DDLCHECK-OK size=N`` when every rank agreed.  Exit status
1 when a value is wrong.  Usage: ddl_check.py [--fail-rank R --exit-code C] [--sleep S]
"""
import argparse
import json
import os
import socket
import sys
import time

import numpy as np

import ddl_runtime as ddl

p = argparse.ArgumentParser()
p.add_argument("--sleep", type=float, default=0.0)
p.add_argument("--fail-rank", type=int, default=None)
p.add_argument("--exit-code", type=int, default=3)
a = p.parse_args()

ddl.init()
R, N = ddl.rank(), ddl.size()
if a.sleep:
    time.sleep(a.sleep)
if a.fail_rank is not None and R == a.fail_rank:
    print(f"DDLCHECK-FAIL rank {R} exits {a.exit_code} on purpose", flush=True)
    sys.exit(a.exit_code)

ones = np.full(1000, float(R + 1), dtype=np.float32)
ramp = np.arange(17, dtype=np.float64) * R
ddl.allreduce_n([ones, ramp], op="sum", check=1e-6, names=["ones", "ramp"])
avg = ddl.allreduce(np.array([float(R)]), op="avg")
want_sum = N * (N + 1) / 2
ok = bool(np.all(ones == want_sum) and np.allclose(ramp, np.arange(17) * (N * (N - 1) / 2))
          and abs(float(avg[0]) - (N - 1) / 2) < 1e-9)
node_vars = {k: os.environ[k] for k in ("SLURM_NODEID", "SLURMD_NODENAME", "SLURM_LOCALID", "SLURM_PROCID",
                                        "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_LOCAL_RANK", "JSM_DOUBLE_HOST",
                                        "ALPS_APP_PE", "ALPS_DOUBLE_NODE", "LOCAL_RANK", "GROUP_RANK",
                                        "CUDA_VISIBLE_DEVICES", "PALS_RANKID", "PALS_LOCAL_RANKID", "PALS_DOUBLE_NODE",
                                        "PALS_DOUBLE_CPUS_BOUND", "ZE_AFFINITY_MASK", "ROCR_VISIBLE_DEVICES",
                                        "DDL_GPU_BINDING", "OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK")
             if k in os.environ}
line = {"rank": R, "size": N, "local_rank": ddl.local_rank(), "local_size": ddl.local_size(),
        "cross_rank": ddl.cross_rank(), "host": socket.gethostname(), "env": node_vars,
        "sum": float(ones[0]), "want_sum": want_sum, "avg": float(avg[0]), "ok": ok}
print("DDLCHECK " + json.dumps(line, sort_keys=True), flush=True)
all_ok = ddl.allreduce(np.array([1.0 if ok else 0.0]), op="sum")
if R == 0 and float(all_ok[0]) == N:
    print(f"DDLCHECK-OK size={N}", flush=True)
sys.exit(0 if ok else 1)
