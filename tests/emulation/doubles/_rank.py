"""Runs as each MPI process the jsrun/aprun TEST DOUBLES start: sets the variables the real
launcher would set for this rank (chosen by the MPI rank, PMI_RANK or OMPI_COMM_WORLD_RANK),
drops the MPI launcher's own per-node variables (the real launcher would not set them: the
ranks are on different nodes), runs the program and writes its exit status to
``<status dir>/<rank>`` so the double can exit with the first failing rank's status."""
import json
import os
import signal
import subprocess
import sys

spec = json.loads(sys.argv[1])
program = sys.argv[3:] if sys.argv[2] == "--" else sys.argv[2:]
rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
if not 0 <= rank < len(spec["ranks"]):
    sys.stderr.write(f"_rank.py: cannot tell this process's rank (PMI_RANK={os.environ.get('PMI_RANK')})\n")
    sys.exit(2)
for var in ("MPI_LOCALRANKID", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"):
    os.environ.pop(var, None)
os.environ.update(spec["env"])
os.environ.update({k: str(v) for k, v in spec["ranks"][rank].items()})
try:
    child = subprocess.Popen(program, close_fds=False)   # keep PMI_FD: the program is the MPI process
except OSError as e:
    sys.stderr.write(f"{program[0]}: {e.strerror}\n")
    code = 127
else:
    # the launchers pass these on to the application (SIGUSR1: a chained job's stop request)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    code = child.wait()
    code = 128 - code if code < 0 else code
status_dir = spec.get("status_dir")
if status_dir:
    tmp = os.path.join(status_dir, f".{rank}")
    with open(tmp, "w") as f:
        f.write(str(code))
    os.rename(tmp, os.path.join(status_dir, str(rank)))
sys.exit(code)
