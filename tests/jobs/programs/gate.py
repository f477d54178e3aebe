"""A rank that says it is running, then waits for a file to exist (for ever if it never does).

    gate.py READY_FILE GO_FILE [--ignore-usr1] [--ignore-term]

--ignore-usr1: takes no notice of a chain's stop signal (a program without the checkpoint lines);
--ignore-term: nor of SIGTERM (only SIGKILL ends it)."""
import signal
import sys
import time
from pathlib import Path

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
if "--ignore-usr1" in sys.argv:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"gate: running, waiting for {go}", flush=True)
ready.write_text("ready\n")
while not go.exists():
    time.sleep(0.1)
print("gate: done", flush=True)
