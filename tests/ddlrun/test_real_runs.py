"""Real launches on this machine: pip's MPICH and Debian's Open MPI, 1-4 ranks, checking
what every rank sees (rank, local rank, emulated node, GPUs of a fake-GPU site, torchrun
variables), the [rank] output prefix, -x forwarding and the first failing rank's status."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddlrun_helpers import HERE, OPENMPI_ENV, openmpi_mpiexec

SHOW = str(HERE / "programs" / "show_env.py")
MPI_HELLO = str(HERE / "programs" / "mpi_hello.py")


def _mpich():
    path = shutil.which("mpiexec")
    if path is None:
        pytest.skip("pip's mpich is not installed (pip install mpich)")
    return path


@pytest.fixture(params=["mpich", "openmpi"])
def mpi(request):
    """(ddlrun arguments choosing the MPI, extra environment)."""
    if request.param == "mpich":
        return ["--mpiexec", _mpich()], {}
    exe = openmpi_mpiexec()
    if exe is None:
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    return ["--mpiexec", exe], dict(OPENMPI_ENV, MPI4PY_MPIABI="openmpi")


def _port_ok(ranks):
    ports = {r["MASTER_PORT"] for r in ranks}
    assert len(ports) == 1 and 20000 <= int(ports.pop()) < 60000


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ranks_see_their_gpus_and_torchrun_variables(ddlrun, mpi, n):
    args, env = mpi
    r = ddlrun(*args, "--site", "fakegpu", "-n", str(n), "python", SHOW, "a b", env=env)
    assert r.returncode == 0, r.stderr
    ranks = r.ranks()
    assert [int(x["RANK"]) for x in ranks] == list(range(n))
    gpr = 4 // n
    for x in ranks:
        rank = int(x["RANK"])
        assert x["LOCAL_RANK"] == str(rank) and x["GROUP_RANK"] == "0"
        assert x["WORLD_SIZE"] == str(n) and x["LOCAL_WORLD_SIZE"] == str(n)
        assert x["MASTER_ADDR"] == "localhost"
        assert x["CUDA_VISIBLE_DEVICES"] == ",".join(str(rank * gpr + i) for i in range(gpr))
        assert x["DDL_GPU_BINDING"] == "per-rank" and x["DDL_OPTIONS"] == f"-mode p:{n}x1x1x1"
        assert "DDL_EMULATE_NODES" not in x
        assert x["argv"] == ["a b"]
    _port_ok(ranks)
    env_lines = [l for l in r.stdout.splitlines() if "ENV " in l]
    if n == 1:
        assert all(l.startswith("ENV ") for l in env_lines)       # one rank: no prefix
    else:
        assert all(re.match(rf"^\[{x['RANK']}\] ENV ", l) for l, x in
                   zip(sorted(env_lines), sorted(ranks, key=lambda x: x["RANK"]))), r.stdout
    # the launch command is printed before it runs
    assert r.stderr.splitlines()[0].startswith(f"ddlrun: {args[1]} -n {n}")


def test_emulated_nodes(ddlrun, mpi):
    args, env = mpi
    r = ddlrun(*args, "--site", "fakegpu", "-n", "4", "--emulate-nodes", "2", "python", SHOW, env=env)
    assert r.returncode == 0, r.stderr
    ranks = r.ranks()
    assert [(x["RANK"], x["LOCAL_RANK"], x["GROUP_RANK"], x["CUDA_VISIBLE_DEVICES"], x["DDL_LAYOUT_GPUS"])
            for x in ranks] == [("0", "0", "0", "0", "0;1"), ("1", "1", "0", "1", "0;1"),
                                ("2", "0", "1", "2", "2;3"), ("3", "1", "1", "3", "2;3")]
    assert {x["DDL_EMULATE_NODES"] for x in ranks} == {"2"}
    assert {x["DDL_OPTIONS"] for x in ranks} == {"-mode p:2x2x1x1"}
    assert {x["LOCAL_WORLD_SIZE"] for x in ranks} == {"2"}


def test_local_rank_binding_keeps_all_gpus_visible(ddlrun, mpi):
    args, env = mpi
    r = ddlrun(*args, "--site", "fakegpu-lr", "-n", "4", "--emulate-nodes", "2", "python", SHOW, env=env)
    assert r.returncode == 0, r.stderr
    for x in r.ranks():
        assert "CUDA_VISIBLE_DEVICES" not in x
        assert x["DDL_GPU_BINDING"] == "local-rank"
        assert x["DDL_LAYOUT_GPUS"] == ("0;1" if x["GROUP_RANK"] == "0" else "2;3")


def test_gpus_index_into_the_visible_devices(ddlrun):
    r = ddlrun("--site", "fakegpu", "-n", "2", "python", SHOW, env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert r.returncode == 0, r.stderr
    assert [x["CUDA_VISIBLE_DEVICES"] for x in r.ranks()] == ["4,5", "6,7"]


def test_mpi_sees_the_same_ranks(ddlrun, mpi):
    pytest.importorskip("mpi4py")
    args, env = mpi
    r = ddlrun(*args, "-n", "2", "python", MPI_HELLO, env=env)
    assert r.returncode == 0, r.stderr
    import json
    seen = sorted((json.loads(l.split("MPI ", 1)[1]) for l in r.stdout.splitlines() if "MPI {" in l),
                  key=lambda d: d["mpi_rank"])
    assert [(d["mpi_rank"], d["mpi_size"], d["RANK"], d["sum"]) for d in seen] == [(0, 2, "0", 1), (1, 2, "1", 1)]
    assert ("Open MPI" if "OMPI_ALLOW_RUN_AS_ROOT" in env else "MPICH") in seen[0]["library"]


def test_openmpi_rankfile_pins_the_layout_cores(ddlrun):
    pytest.importorskip("mpi4py")
    exe = openmpi_mpiexec()
    if exe is None:
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    r = ddlrun("--mpiexec", exe, "-n", "1", "--cores-per-rank", "2", "python", MPI_HELLO,
               env=dict(OPENMPI_ENV, MPI4PY_MPIABI="openmpi"))
    assert r.returncode == 0, r.stderr
    assert "--rankfile" in r.stderr.splitlines()[0]
    assert '"cpus": [0, 1]' in r.stdout


def test_forwarded_variables_and_no_prefix(ddlrun, mpi, tmp_path):
    args, env = mpi
    r = ddlrun(*args, "-n", "2", "-x", "MY_VAR=x y", "-x", "OTHER_VAR", "--no-prefix", "--timeline", "t.json",
               "python", SHOW, env={**env, "OTHER_VAR": "from-here"})
    assert r.returncode == 0, r.stderr
    assert [(x["MY_VAR"], x["OTHER_VAR"]) for x in r.ranks()] == [("x y", "from-here")] * 2
    assert {x["DDL_TIMELINE"] for x in r.ranks()} == {str(tmp_path / "t.json")}
    assert all(l.startswith("ENV ") for l in r.stdout.splitlines() if "ENV " in l), r.stdout


@pytest.mark.parametrize("prefix", [True, False])
def test_output_lines_never_mix(ddlrun, prefix):
    r = ddlrun("-n", "2", *([] if prefix else ["--no-prefix"]), "python", SHOW, env={"LINES": "400"})
    assert r.returncode == 0, r.stderr
    count, bad = _mixed(r.stdout, prefix)
    assert count == 800 and not bad, bad[:3]


def _openmpi_lines(ddlrun, tmp_path, *args, env=None):
    """3 ranks under Open MPI print 2000 long lines each, all at once (they wait for each other)."""
    exe = openmpi_mpiexec()
    if exe is None:
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    (tmp_path / "barrier").mkdir()
    return ddlrun("--mpiexec", exe, "-n", "3", "--oversubscribe", *args, "python", SHOW,
                  env={**OPENMPI_ENV, "LINES": "2000", "LINES_BARRIER": str(tmp_path / "barrier"), **(env or {})})


def _mixed(text, prefix):
    lines = [l for l in text.splitlines() if "line-" in l]
    pattern = r"\[(\d)\] line-\1-\d+-x{200}" if prefix else r"line-\d-\d+-x{200}"
    return len(lines), [l[:40] + "..." + l[-40:] for l in lines if not re.fullmatch(pattern, l)]


@pytest.mark.parametrize("prefix", [True, False])
def test_openmpi_output_lines_never_mix(ddlrun, tmp_path, prefix):
    """Open MPI's forwarder reads a rank's output in chunks that may end mid-line and mixes the
    ranks' chunks (before ddlrun put them back together, this run cut hundreds of lines every time)."""
    r = _openmpi_lines(ddlrun, tmp_path, *([] if prefix else ["--no-prefix"]))
    assert r.returncode == 0, r.stderr
    count, bad = _mixed(r.stdout, prefix)
    assert count == 6000 and not bad, (count, bad[:3])
    assert "--tag-output" in r.stderr.splitlines()[0]
    assert "<stdout>" not in r.stdout


def test_openmpi_stderr_lines_whole_and_the_exit_reports_read(ddlrun, tmp_path):
    """The same on stderr, where each rank's exit report travels: read, not printed.  (No rank
    fails here: when one does while the others print, Open MPI aborts the job and may write the
    rest of a cut line untagged at the end, seen once in 25 such runs, which no reader can put back.)"""
    r = _openmpi_lines(ddlrun, tmp_path, env={"LINES_STREAM": "stderr"})
    assert r.returncode == 0, r.stderr[-2000:]
    count, bad = _mixed(r.stderr, True)
    assert count == 6000 and not bad, (count, bad[:3])
    assert "ddlrun-exit" not in r.stderr and "<stderr>" not in r.stderr


def test_exit_status_is_the_first_failing_ranks(ddlrun, mpi):
    args, env = mpi
    r = ddlrun(*args, "-n", "3", "--oversubscribe", "python", SHOW, env={**env, "FAIL_RANK": "1", "FAIL_CODE": "7"})
    assert r.returncode == 7, r.stderr
    assert "ddlrun: rank 1 failed first, with exit status 7" in r.stderr


def test_a_failed_rank_does_not_leave_the_job_hanging(ddlrun):
    t0 = time.monotonic()
    r = ddlrun("-n", "2", "python", SHOW, timeout=60,
               env={"FAIL_RANK": "1", "FAIL_CODE": "5", "SLEEP_RANK": "0", "WML_DDLRUN_FAIL_GRACE_S": "1"})
    assert r.returncode == 5, r.stderr
    assert time.monotonic() - t0 < 40
    assert "rank 1 exited with status 5; stopping the other ranks in 1 s" in r.stderr
    assert "stopping the job (SIGTERM)" in r.stderr


def test_a_rank_that_stopped_for_the_walltime_ends_the_ranks_that_linger(ddlrun, mpi):
    """A rank that saved and stopped (75) while another runs on: the save was collective, so the
    other was ending too; after the grace ddlrun ends it, says which rank it waited for, and the
    job counts as stopped for the walltime (75), not failed."""
    args, env = mpi
    t0 = time.monotonic()
    r = ddlrun(*args, "-n", "2", "python", SHOW, timeout=60,
               env={**env, "FAIL_RANK": "1", "FAIL_CODE": "75", "SLEEP_RANK": "0", "WML_DDLRUN_FAIL_GRACE_S": "1"})
    assert r.returncode == 75, r.stderr
    assert time.monotonic() - t0 < 40
    assert "rank 1 stopped for the walltime 1 s ago; rank(s) 0 have not ended: stopping the job (SIGTERM)" in r.stderr
    assert "stopped for the walltime (exit status 75)" in r.stderr and "failed first" not in r.stderr


def test_shim_tells_a_walltime_stop_by_its_report_and_exits_0_to_the_launcher(tmp_path, monkeypatch, capfd):
    """srun --kill-on-bad-exit ended the step at the first rank that exited 75, killing the others
    in their exit and dropping their reports (seen on the local Slurm).  With a report to write,
    the shim reports 75 and exits 0; with none (no ddlrun reading), 75 stays its exit status."""
    from ddl_runtime.checkpoint.protocol import EXIT_RESUME
    from wmlce_tools.ddlrun import rankexec
    from wmlce_tools.ddlrun.exitreport import RankExit, parse_report

    assert rankexec.EXIT_RESUME == EXIT_RESUME
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "1")
    monkeypatch.setenv("MPI_LOCALRANKID", "0")
    program = [sys.executable, "-c", "raise SystemExit(75)"]
    base = ["--size", "1", "--ranks-per-node", "1", "--binding", "none", "--gpus", "", "--mode", "p:1",
            "--master", "localhost:20000"]
    token = "0123456789abcdef"
    assert rankexec.main(base + ["--report", token, "--"] + program) == 0
    assert parse_report(capfd.readouterr().err.encode(), token) == RankExit(0, 75)
    assert rankexec.main(base + ["--"] + program) == 75
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    assert rankexec.main(base + ["--report", token, "--"] + failing) == 3


def test_shim_reports_a_program_missing_on_its_host(tmp_path, monkeypatch, capfd):
    """ddlrun checks PROGRAM where it runs; on another host it may be missing: the rank says
    so in one line, exits 127 and reports that to ddlrun."""
    from wmlce_tools.ddlrun.exitreport import RankExit, parse_report
    from wmlce_tools.ddlrun.rankexec import main as shim_main

    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "1")
    monkeypatch.setenv("MPI_LOCALRANKID", "0")
    token = "0123456789abcdef"
    code = shim_main(["--size", "1", "--ranks-per-node", "1", "--binding", "none", "--gpus", "",
                      "--mode", "p:1", "--master", "localhost:20000", "--report", token,
                      "--", str(tmp_path / "gone")])
    assert code == 127
    err = capfd.readouterr().err.splitlines(keepends=True)
    assert err[0] == f"ddlrun: error: rank 0: cannot run '{tmp_path / 'gone'}': not found\n"
    assert parse_report(err[1].encode(), token) == RankExit(0, 127)
    assert parse_report(err[1].encode(), "f" * 16) is None        # another launch's token


def test_check_passes_here_and_fails_for_unreachable_hosts(ddlrun):
    r = ddlrun("--check", "-n", "2", "python", SHOW)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^localhost\s+yes\s+\S+\s+0\s+ok$", r.stderr, re.M), r.stderr
    assert len(r.ranks()) == 2
    r = ddlrun("--check", "--site", "fakegpu", "-n", "2", "python", SHOW)
    assert r.returncode == 1
    assert "FAIL: 0 GPU(s), the layout needs 4 per node" in r.stderr and not r.ranks()
    r = ddlrun("--check", "--site", "fakegpu", "-n", "2", "python", SHOW, env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    assert r.returncode == 0, r.stderr
    r = ddlrun("--check", "--dry-run", "--site", "slurm-gpu", "-H", "localhost,nohost.invalid", "--gpus-per-rank", "0",
               "python", SHOW)
    assert r.returncode == 1
    assert re.search(r"^nohost\.invalid\s+no\s+-\s+-\s+FAIL: ", r.stderr, re.M), r.stderr
    assert "check failed on 1 of 2 host(s)" in r.stderr


def test_sigterm_stops_every_rank(isolated_env, site_dir, tmp_path):
    """SIGTERM to ddlrun (a batch system ending the job) reaches every rank; nothing is left."""
    import json
    import os
    import signal
    import subprocess

    env = dict(isolated_env, SLEEP_RANK="0")
    p = subprocess.Popen([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", "1", "python", SHOW],
                         env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()            # the rank is up (its ENV line), then sleeps
        assert "ENV " in line, p.stderr.read() if p.poll() is not None else line
        pid = json.loads(line.split("ENV ", 1)[1])["pid"]
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) != 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"rank process {pid} survived ddlrun's SIGTERM")


@pytest.mark.parametrize("site, gpus", [("fakegpu", [0, 0, 0, 0]), ("fakegpu-lr", [0, 1, 2, 3])])
def test_ddl_runtime_sees_the_layout(ddlrun, site, gpus):
    """The contract with ddl_runtime: on 2 emulated nodes its local/cross ranks are the
    Layout's, and its GPU is 0 of the narrowed set (per-rank) or the Layout's (local-rank)."""
    pytest.importorskip("mpi4py")
    import json

    r = ddlrun("--site", site, "-n", "4", "--emulate-nodes", "2", "python",
               str(HERE / "programs" / "ddl_topology.py"), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    topo = sorted((json.loads(l.split("TOPO ", 1)[1]) for l in r.stdout.splitlines() if "TOPO " in l),
                  key=lambda d: d["rank"])
    assert [(d["rank"], d["RANK"], d["local_rank"], d["local_size"], d["cross_rank"], d["cross_size"])
            for d in topo] == [(0, 0, 0, 2, 0, 2), (1, 1, 1, 2, 0, 2), (2, 2, 0, 2, 1, 2), (3, 3, 1, 2, 1, 2)]
    assert [d["gpu"] for d in topo] == gpus
    assert {d["sum"] for d in topo} == {6.0}


def test_sigkill_of_ddlrun_leaves_no_rank_behind(isolated_env, tmp_path):
    """Even when ddlrun itself is killed outright, the launcher and the ranks go with it."""
    import json
    import os
    import signal
    import subprocess

    env = dict(isolated_env, SLEEP_RANK="1")
    p = subprocess.Popen([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", "2", "python", SHOW],
                         env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pid = None
    try:
        for line in p.stdout:               # bounded by pytest's timeout; ranks print at once
            if line.startswith("[1] ENV "):
                pid = json.loads(line.split("ENV ", 1)[1])["pid"]
                break
        assert pid is not None
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break                  # exited, waiting to be reaped
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail(f"rank process {pid} outlived a SIGKILLed ddlrun")


def test_a_stop_signal_that_comes_while_the_ranks_start_waits_for_them(isolated_env, tmp_path):
    """A chained job's stop signal that reaches ddlrun while the ranks' shims are still starting
    (a loaded node: seen as a rank killed by SIGUSR1 in a segment's first second) is held until
    every rank is up, then relayed: each rank's program gets it and none dies of it."""
    import signal
    import subprocess
    import textwrap

    slow = tmp_path / "slow"
    slow.mkdir()    # each shim's interpreter starts 2 s late: the signal comes before it could catch it
    (slow / "sitecustomize.py").write_text(
        "import sys, time\nif 'wmlce_tools.ddlrun.rankexec' in sys.orig_argv:\n    time.sleep(2)\n")
    prog = tmp_path / "wait_for_stop.py"
    prog.write_text(textwrap.dedent("""\
        import signal, sys, time
        got = []
        signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            time.sleep(0.05)
        print("GOT" if got else "NO SIGNAL", flush=True)
        sys.exit(75 if got else 3)
        """))
    env = dict(isolated_env, WML_STOP_SIGNAL="USR1",
               PYTHONPATH=os.pathsep.join(p for p in (str(slow), isolated_env.get("PYTHONPATH", "")) if p))
    p = subprocess.Popen([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "-n", "2", "python", str(prog)],
                         env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGUSR1, signal.SIG_IGN))   # as the job script starts it
    try:
        assert p.stderr.readline().startswith("ddlrun: "), "ddlrun did not print its launch line"
        time.sleep(0.5)                      # the launcher is starting the (slow) shims
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    assert sorted(l for l in out.splitlines() if "GOT" in l or "NO SIGNAL" in l) == ["[0] GOT", "[1] GOT"], out + err
    assert p.returncode == 75, out + err


def test_a_stop_signal_repeated_after_the_program_ended_cannot_kill_the_shim(tmp_path):
    """A chained job's stop signal is repeated until every rank has ended; one that reaches the rank
    shim after its program ended (while the shim exits, when Python has put the killing default
    back for the signal it handled) must not kill it: a finished segment would read as failed."""
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent("""\
        import os, signal, sys
        from wmlce_tools.ddlrun import rankexec
        code = rankexec.main(["--size", "1", "--ranks-per-node", "1", "--binding", "none", "--gpus", ";",
                              "--mode", "p:1x1x1x1", "--master", "localhost:29999", "--", sys.executable, "-c", "pass"])
        os.kill(os.getpid(), signal.SIGUSR1)       # the launcher's next repeat
        print("ALIVE", code, signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN, flush=True)
        """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "WML_", "PMI_", "OMPI_", "SLURM_"))}
    p = subprocess.run([sys.executable, str(probe)], env=dict(env, WML_STOP_SIGNAL="USR1", PMI_RANK="0", PMI_SIZE="1", MPI_LOCALRANKID="0",
                       PYTHONPATH=str(Path(__file__).resolve().parents[2])),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "ALIVE 0 True" in p.stdout, (p.returncode, p.stdout, p.stderr)


def test_the_shims_repeats_never_reach_a_program_that_has_put_the_default_back(tmp_path):
    """The shim repeats a chained job's stop signal until its program ends, for one that came before
    the program's handler; a program that handled it and is exiting (Python puts the killing default
    back as it finalizes; here for longer than a repeat) must end with its own 75, not die of a
    repeat (seen in CI: 'rank 0 failed first, with exit status 138')."""
    prog = tmp_path / "stops_then_exits_slowly.py"
    prog.write_text(textwrap.dedent("""\
        import os, signal, sys, time
        got = []
        signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
        os.kill(os.getppid(), signal.SIGUSR1)          # the launcher's stop signal reaches the shim
        end = time.monotonic() + 30
        while not got and time.monotonic() < end:
            time.sleep(0.05)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # as Python's finalization does
        print("GOT" if got else "NO SIGNAL", flush=True)
        time.sleep(3)                                  # a slow exit: longer than the shim's RESEND_S
        sys.exit(75 if got else 3)
        """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "WML_", "PMI_", "OMPI_", "SLURM_"))}
    p = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.rankexec", "--size", "1", "--ranks-per-node", "1",
                        "--binding", "none", "--gpus", ";", "--mode", "p:1x1x1x1", "--master", "localhost:29999",
                        "--", sys.executable, str(prog)],
                       env=dict(env, WML_STOP_SIGNAL="USR1", PMI_RANK="0", PMI_SIZE="1", MPI_LOCALRANKID="0",
                                PYTHONPATH=str(Path(__file__).resolve().parents[2])),
                       capture_output=True, text=True, timeout=60)
    assert "GOT" in p.stdout, (p.returncode, p.stdout, p.stderr)
    assert p.returncode == 75, (p.returncode, p.stdout, p.stderr)
