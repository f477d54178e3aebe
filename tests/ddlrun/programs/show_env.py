"""Print what this rank sees, as one JSON line: ENV {...}; then $LINES long lines (to stderr with
LINES_STREAM=stderr; all ranks at once with LINES_BARRIER=DIR), then sleep (SLEEP_RANK) or fail
(FAIL_RANK, FAIL_CODE) as told."""
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
if os.environ.get("LINES_BARRIER"):     # a directory: the ranks start their LINES together
    import pathlib
    import time
    barrier = pathlib.Path(os.environ["LINES_BARRIER"])
    (barrier / os.environ["RANK"]).touch()
    deadline = time.monotonic() + 30
    while len(list(barrier.iterdir())) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
        time.sleep(0.01)
lines_to = sys.stderr if os.environ.get("LINES_STREAM") == "stderr" else sys.stdout
for i in range(int(os.environ.get("LINES", "0"))):
    print(f"line-{os.environ['RANK']}-{i}-" + "x" * 200, file=lines_to)
if os.environ.get("SLEEP_RANK") == os.environ["RANK"]:
    import time
    time.sleep(120)
if os.environ.get("FAIL_RANK") == os.environ["RANK"]:
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
