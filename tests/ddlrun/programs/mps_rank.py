"""A rank of the MPS tests: appends one JSON line to $FAKE_MPS_JOURNAL with what it sees (its
CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_LOG_DIRECTORY, whether a control daemon runs there), then sleeps
SLEEP_S seconds, and exits FAIL_CODE (or is killed, FAIL_CODE=SIGKILL) where RANK is FAIL_RANK (and, with FAIL_ATTEMPT, only in that
attempt of a healing run: $WML_ATTEMPT)."""
import json
import os
import sys
import time

pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
alive = None
if pipe:
    try:
        with open(os.path.join(pipe, "nvidia-cuda-mps-control.pid")) as f:
            os.kill(int(f.read().split()[0]), 0)
        alive = True
    except (OSError, ValueError, IndexError):
        alive = False
with open(os.environ["FAKE_MPS_JOURNAL"], "a") as f:
    f.write(json.dumps({"event": "rank", "t": time.time(), "rank": int(os.environ["RANK"]),
                        "group_rank": os.environ.get("GROUP_RANK"), "node": os.environ.get("SLURMD_NODENAME", ""),
                        "attempt": os.environ.get("WML_ATTEMPT"), "pipe": pipe, "log": os.environ.get("CUDA_MPS_LOG_DIRECTORY"), "alive": alive}) + "\n")
time.sleep(float(os.environ.get("SLEEP_S", "0")))
if os.environ.get("FAIL_RANK") == os.environ["RANK"] and os.environ.get("FAIL_ATTEMPT", os.environ.get("WML_ATTEMPT")) == os.environ.get("WML_ATTEMPT"):
    if os.environ.get("FAIL_CODE") == "SIGKILL":      # as a rank of a node that died
        os.kill(os.getpid(), 9)
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
