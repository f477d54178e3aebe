"""A chain segment's one step in its job script (``wml submit --chain N``); the script ``exec``s
it, so a signal the scheduler sends the batch shell reaches it:

    exec python -m wmlce_tools.chain.segment RUN_DIR INDEX [--timer S] [--afterok-only]
        [--then WORD... ] -- DDLRUN_ARGV...

- The run has already finished (FINISHED in ``$WML_CHECKPOINT_DIR``): it says so and exits 0.
- ``$WML_STOP_SIGNAL`` before the walltime, from the scheduler or, with ``--timer S`` (a
  scheduler that sends no warning: PBS Pro, Cobalt, the local site), from this step's own timer
  S seconds after it starts: one line saying so, then the signal goes to ddlrun, which passes it
  to every rank (they checkpoint, stop and exit 75), and it is repeated every 5 s until ddlrun
  ends (ddlrun, and each rank, ignore it until they can handle it; asking again is harmless).
  One that comes before ddlrun runs is passed on once it does.
- ddlrun starts with the signal ignored; its exit status is the segment's (128 + N when a
  signal N ended it, as a shell says).
- When ddlrun has ended: ``--then`` (the staged env's end: its words up to ``--``, run without
  a shell), then ``segment_end`` (FINISHED and cancelling the rest, or which segment resumes),
  whose status this step exits with.

The handler is installed before anything else is imported, so the window in which the signal
would still end the step (as it ends a shell that traps nothing) is the interpreter's start.
"""
from __future__ import annotations

import os
import signal
import sys
import time

#: how often a stop is asked again until ddlrun ends (s)
RESEND_S = 5.0
_USAGE = ("usage: python -m wmlce_tools.chain.segment RUN_DIR INDEX [--timer S] [--afterok-only] "
          "[--then WORD...] -- DDLRUN_ARGV...")


class _Stop:
    """The stop signal's state: asked (and by whom), and ddlrun to pass it to."""

    def __init__(self, signum: int, timer: bool) -> None:
        self.signum, self.timer = signum, timer
        self.asked = False
        self.child = None           # ddlrun's Popen, once it runs
        self.last_sent = 0.0

    def handler(self, signum, frame) -> None:
        if self.child is not None and self.child.returncode is not None:
            return                   # ddlrun has ended: nothing to stop
        if not self.asked:
            frm = "this script's timer: the walltime is near" if self.timer else \
                "the scheduler's warning before the walltime"
            os.write(2, f"wml: SIG{signal.Signals(self.signum).name[3:]} ({frm}): asking every rank to checkpoint "
                        f"and stop\n".encode())
        self.asked = True
        self.forward()

    def forward(self) -> None:
        if self.asked and self.child is not None and self.child.returncode is None:
            try:
                os.kill(self.child.pid, self.signum)
            except ProcessLookupError:
                pass
            self.last_sent = time.monotonic()


def _parse(argv):
    if "--" not in argv:
        raise ValueError("no -- before ddlrun's command")
    cut = argv.index("--")
    head, ddlrun = argv[:cut], argv[cut + 1:]
    then = []
    if "--then" in head:
        at = head.index("--then")
        head, then = head[:at], head[at + 1:]
        if not then:
            raise ValueError("--then without a command")
    timer, afterok = None, False
    rest = []
    i = 0
    while i < len(head):
        if head[i] == "--timer":
            try:
                timer = float(head[i + 1])
            except (IndexError, ValueError):
                raise ValueError("--timer takes seconds") from None
            i += 2
        elif head[i] == "--afterok-only":
            afterok = True
            i += 1
        else:
            rest.append(head[i])
            i += 1
    if len(rest) != 2 or not rest[1].isdigit():
        raise ValueError(f"give RUN_DIR and INDEX, not {' '.join(rest) or 'nothing'}")
    if not ddlrun:
        raise ValueError("no ddlrun command after --")
    return rest[0], int(rest[1]), timer, afterok, then, ddlrun


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(__doc__)
        return 0
    name = os.environ.get("WML_STOP_SIGNAL", "USR1")
    signum = getattr(signal, "SIG" + name, None)
    try:
        run_dir, index, timer, afterok, then, ddlrun = _parse(argv)
    except (ValueError, IndexError) as e:
        sys.stderr.write(f"wml: error: {e or 'RUN_DIR INDEX'}; {_USAGE}\n")
        return 2
    if signum is None:
        sys.stderr.write(f"wml: error: WML_STOP_SIGNAL={name!r} is not a signal name\n")
        return 2
    stop = _Stop(signum, timer is not None)
    signal.signal(signum, stop.handler)
    # ddl_runtime.checkpoint (imported for the names it shares) installs the runtime's own stop
    # handler, which ignores the signal once it has taken one: this step's goes back, and a
    # signal the runtime's took meanwhile counts.
    from ddl_runtime.checkpoint.protocol import FINISHED_FILE

    if signal.signal(signum, stop.handler) is signal.SIG_IGN:
        stop.handler(signum, None)
    return _run(stop, run_dir, index, timer, afterok, then, ddlrun, FINISHED_FILE)


def _run(stop: _Stop, run_dir, index, timer, afterok, then, ddlrun, finished_name: str) -> int:
    import subprocess
    from pathlib import Path

    ckpt = os.environ.get("WML_CHECKPOINT_DIR", "")
    if ckpt and os.path.exists(os.path.join(ckpt, finished_name)):
        print(f"wml: run {os.environ.get('WML_RUN_ID', '?')} has already finished ({os.path.join(ckpt, finished_name)}); "
              f"segment {index} of {os.environ.get('WML_CHAIN_LENGTH', '?')} has nothing to do", flush=True)
        return 0
    if ckpt:            # the previous segment's save cut short by its walltime; where this one starts from
        from .overrun import after_previous
        from .record import write_start

        stopped = after_previous(Path(run_dir), index, Path(ckpt), signal.Signals(stop.signum).name[3:],
                                 lambda text: print(f"wml: {text}", flush=True))
        if stopped is not None:
            return stopped
        try:
            write_start(Path(run_dir), index, Path(ckpt))
        except OSError as e:
            print(f"wml: could not record where segment {index} starts: {e}", flush=True)
    if timer is not None:   # the script's own warning: the stop signal to this process, as the scheduler would
        signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), stop.signum))
        signal.setitimer(signal.ITIMER_REAL, max(timer, 0.001))

    def ignore_stop():     # in the child: ddlrun installs its own handler when it can act on it
        signal.signal(stop.signum, signal.SIG_IGN)

    try:
        stop.child = subprocess.Popen(ddlrun, preexec_fn=ignore_stop)
    except OSError as e:
        sys.stderr.write(f"wml: error: cannot run {ddlrun[0]}: {e.strerror}\n")
        status = 127
    else:
        stop.forward()      # a stop asked before ddlrun ran
        while True:     # a signal runs the handler and the wait goes on; a stop asked is repeated
            try:
                rc = stop.child.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if stop.asked and time.monotonic() - stop.last_sent >= RESEND_S:
                    stop.forward()
        status = 128 - rc if rc < 0 else rc
    signal.setitimer(signal.ITIMER_REAL, 0)
    if then:
        try:
            subprocess.run(then, stdin=subprocess.DEVNULL)
        except OSError as e:
            sys.stderr.write(f"wml: warning: cannot run {then[0]}: {e.strerror}\n")

    from .segment_end import end_segment

    sys.stdout.flush()
    try:
        return end_segment(Path(run_dir), index, status, afterok)
    except OSError as e:
        print(f"wml: could not record how segment {index} ended: {e}", flush=True)
        return status


if __name__ == "__main__":
    sys.exit(main())
