"""A stand-in for ``nvidia-cuda-mps-control`` (NVIDIA's MPS control daemon and its client) on a
machine without a GPU, for the tests: put first on PATH under that name.

  nvidia-cuda-mps-control -d    starts the daemon in the background (its own session, stdio on
                                /dev/null): it listens on the UNIX socket ``control`` in
                                $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps), writes
                                nvidia-cuda-mps-control.pid there and control.log in
                                $CUDA_MPS_LOG_DIRECTORY; a second one on the same pipe directory
                                is refused, as NVIDIA's is.
  echo CMD | nvidia-cuda-mps-control
                                the client: CMD (get_server_list, quit) to the daemon of
                                $CUDA_MPS_PIPE_DIRECTORY; exits 1 when none answers.

Every call, and every command the daemon takes, appends one JSON line to $FAKE_MPS_JOURNAL.
FAKE_MPS_FAIL=start: ``-d`` fails as a daemon that cannot start does (one line, exit 1).
"""
import json
import os
import socket
import sys
import time

PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
LOG = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
CONTROL = os.path.join(PIPE, "control")
PID_FILE = os.path.join(PIPE, "nvidia-cuda-mps-control.pid")


def journal(**entry) -> None:
    path = os.environ.get("FAKE_MPS_JOURNAL")
    if path:
        entry.update(t=time.time(), pid=os.getpid(), pipe=PIPE, log=LOG, node=os.environ.get("SLURMD_NODENAME", ""))
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def log(line: str) -> None:
    with open(os.path.join(LOG, "control.log"), "a") as f:
        f.write(f"[{time.strftime('%F %T')}] {line}\n")


def ask(command: str):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(CONTROL)
        s.sendall(command.encode() + b"\n")
        return s.recv(4096).decode()
    except OSError:
        return None
    finally:
        s.close()


def serve(sock: socket.socket) -> None:
    with open(PID_FILE, "w") as f:
        f.write(f"{os.getpid()}\n")
    log("control daemon started")
    while True:
        conn, _ = sock.accept()
        with conn:
            command = conn.recv(1024).decode().strip()
            journal(event="daemon", cmd=command)
            if command == "quit":
                log("quit")
                sock.close()
                for path in (CONTROL, PID_FILE):
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
                conn.sendall(b"\n")
                return
            conn.sendall(b"\n")            # get_server_list: no server running yet


def start() -> int:
    journal(event="start", argv=sys.argv[1:])
    if os.environ.get("FAKE_MPS_FAIL") == "start":
        print("stand-in: no CUDA-capable device is detected", file=sys.stderr)
        return 1
    if ask("get_server_list") is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    try:
        os.unlink(CONTROL)
    except OSError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(CONTROL)
    sock.listen(8)
    if os.fork():
        return 0                       # the caller's `-d` returns; the daemon goes on
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        serve(sock)
    finally:
        os._exit(0)


def client() -> int:
    command = sys.stdin.read().strip()
    journal(event="client", cmd=command)
    answer = ask(command)
    if answer is None:
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    sys.stdout.write(answer)
    return 0


if __name__ == "__main__":
    sys.exit(start() if sys.argv[1:] == ["-d"] else client())
