"""Print what this rank sees, as one JSON line: ENV {...}."""
import json
import os
import sys

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES", "DDL_OPTIONS", "DDL_EMULATE_NODES", "DDL_GPU_BINDING", "DDL_LAYOUT_GPUS",
        "DDL_TIMELINE", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "MY_VAR", "OTHER_VAR", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_LOCALID")
info = {k: os.environ[k] for k in KEYS if k in os.environ}
info["argv"] = sys.argv[1:]
info["pid"] = os.getpid()
print("ENV " + json.dumps(info), flush=True)
for i in range(int(os.environ.get("LINES", "0"))):
    print(f"line-{os.environ['RANK']}-{i}-" + "x" * 200)
if os.environ.get("SLEEP_RANK") == os.environ["RANK"]:
    import time
    time.sleep(120)
if os.environ.get("FAIL_RANK") == os.environ["RANK"]:
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
