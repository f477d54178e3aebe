"""The shared-memory agreement and allreduce of one-host jobs (ddl_runtime/transports/shm/group.py)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from ddl_runtime.engine.buffers import as_tensor
from ddl_runtime.errors import DDLInputError
from ddl_runtime.core.jobenv import JobEnvironment
from ddl_runtime.transports.shm.group import plan

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("n", [2, 3])
def test_one_host_job_reduces_through_shared_memory(run_mpi, n):
    """Every dtype and op agrees with the MPI path; the windows' files are unlinked while mapped."""
    summary = run_mpi(n, "shm_job.py", "values", timeout=120).summary(n)
    for s in summary:
        assert s["shm"] and s["grew"] and s["small"] and s["heap"] and s["algorithm"] == "flat"
        assert s["heap_segments"] >= 2
        assert s["files"], "no mapping found for the shared windows"
        for f in s["files"]:  # anonymous, or a file already removed: nothing can leak into /dev/shm
            assert f == "" or f.endswith("(deleted)"), f


def test_shared_memory_path_on_openmpi(run_mpi, openmpi):
    """Open MPI's osc/sm windows: same values, files likewise unlinked while mapped."""
    summary = run_mpi(2, "shm_job.py", "values", mpi=openmpi, timeout=120).summary(2)
    for s in summary:
        assert s["shm"] and s["files"]
        assert all(f == "" or f.endswith("(deleted)") for f in s["files"]), s["files"]


@pytest.mark.parametrize("n, env", [(4, {"DDL_EMULATE_NODES": "2"}), (2, {"DDL_EMULATE_NODES": "2"}),
                                    (2, {"DDL_SHM": "0"}), (4, {"DDL_OPTIONS": "-mode p:2x2"})])
def test_emulated_nodes_and_opt_out_take_the_mpi_path(run_mpi, n, env):
    """Ranks of different (emulated) nodes never share memory; DDL_SHM=0 turns the path off."""
    summary = run_mpi(n, "shm_job.py", "values", env=env, timeout=120).summary(n)
    assert not any(s["shm"] for s in summary)
    if n == 4:
        assert all(s["algorithm"] == "hierarchical" for s in summary)


def test_shared_zeros_arrays_stay_readable_after_finalize(run_mpi):
    """finalize frees the heap's windows except one whose arrays are still alive (no crash)."""
    result = run_mpi(2, "shm_job.py", "heap_after_finalize", timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = sorted(line.split() for line in result.stdout.splitlines() if line.startswith("AFTER "))
    # the kept array holds the sum; one window stays mapped, the unused one was freed
    assert lines == [["AFTER", "0", "3000.0", "1", "0"], ["AFTER", "1", "3000.0", "1", "0"]], result.stdout
    assert result.stderr.count("still in use after finalize") == 2


@pytest.mark.parametrize("n, env", [(2, {}), (3, {}), (2, {"DDL_SHM": "0"})])
def test_out_of_place_results_live_in_shared_memory_and_are_never_written_while_alive(run_mpi, n, env):
    """allreduce_n_fresh (what ddl_runtime.tensorflow reduces with): values of 4 dtypes equal the
    in-place path's with the same bits on every rank; regions are reused once dropped, never
    while a result lives, also when ranks let go at different moments; mismatch, small, mixed
    dtypes and no-room fallbacks; DDL_SHM=0 gives the same values from private memory."""
    summary = run_mpi(n, "results_job.py", "values", env=env, timeout=180).summary(n)
    shm = not env
    assert all(s["shm"] == shm for s in summary)
    assert len({s["regions"] for s in summary}) == 1 and (summary[0]["regions"] > 1) == shm


def test_results_stay_readable_after_finalize_without_a_warning(run_mpi):
    result = run_mpi(2, "results_job.py", "after_finalize", timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = sorted(line.split() for line in result.stdout.splitlines() if line.startswith("AFTER "))
    assert lines == [["AFTER", "0", "1200000.0", "1"], ["AFTER", "1", "1200000.0", "1"]], result.stdout
    assert "still in use" not in result.stderr  # results held by tensors at exit are expected


def test_a_rank_dying_during_a_shared_memory_wait_ends_the_job_and_leaves_no_segment(run_mpi):
    result = run_mpi(2, "shm_job.py", "crash", timeout=60)
    assert result.returncode != 0
    assert "NOT REACHED" not in result.stdout
    assert "uncaught exception: RuntimeError: rank 1 fails on purpose" in result.stderr
    (files,) = result.json_lines("FILES ")
    assert files
    for f in files:
        path = f.replace(" (deleted)", "")
        assert not path or not os.path.exists(path), f"{path} left behind"


@pytest.mark.parametrize("chunk_bytes", [0, 8, 1 << 20])
def test_plan_covers_every_element_once_and_slices_are_contiguous(chunk_bytes):
    refs = [as_tensor(np.zeros(s, dt), f"t{i}") for i, (s, dt) in
            enumerate([(5, np.float32), (0, np.float32), (9, np.float64), (4, np.float16), (13, np.float32)])]
    for size in (1, 2, 3, 4):
        pieces_by_rank = [plan(refs, size, r, chunk_bytes) for r in range(size)]
        groups = pieces_by_rank[0].groups
        assert [g.dtype for g in groups] == [np.dtype(np.float32), np.dtype(np.float64)]  # float16 -> float32
        assert [g.length for g in groups] == [5 + 4 + 13, 9]
        assert all(g.byte_offset % 64 == 0 for g in groups)
        for r, p in enumerate(pieces_by_rank):
            assert all(piece.owner == r for piece in p.own)
            seen = {}
            for piece in p.own + p.others:
                for k in range(piece.start, piece.stop):
                    key = (piece.tensor, k)
                    assert key not in seen
                    seen[key] = piece.offset + k - piece.start
            assert len(seen) == 5 + 9 + 4 + 13
        for g in range(len(groups)):  # each rank owns one contiguous run of every dtype group
            owned = [sorted(k for piece in p.own if piece.group == g
                            for k in range(piece.offset, piece.offset + piece.stop - piece.start))
                     for p in pieces_by_rank]
            flat = [k for run in owned for k in run]
            assert flat == list(range(groups[g].length))
        rounds = [len(p.rounds) for p in pieces_by_rank]
        assert len(set(rounds)) == 1  # every rank runs the same number of rounds (one barrier each)
        if chunk_bytes == 8 and size == 1:
            assert rounds[0] == -(-22 * 4 // 8)  # the float32 run (22 values) in 2-value chunks


def test_ddl_shm_setting():
    assert JobEnvironment.from_environ({}).shared_memory is True
    assert JobEnvironment.from_environ({"DDL_SHM": "off"}).shared_memory is False
    with pytest.raises(DDLInputError, match="DDL_SHM='maybe' must be 1 or 0"):
        JobEnvironment.from_environ({"DDL_SHM": "maybe"})


SINGLE = r"""
import numpy as np, torch, torch.distributed as dist
import ddl_runtime as ddl
from ddl_runtime.transports import gpu
from ddl_runtime.state import runtime as _rt
ddl.init()
rt = _rt.current()
rt.engine.submit = None  # one rank: the reduction is the identity, no bucket may be started
x = np.arange(6, dtype=np.float32); t = torch.arange(4, dtype=torch.bfloat16)
ddl.allreduce_n([x, t], op="avg"); ddl.allreduce_n([x], op="sum", check=1e-6)
ddl.allreduce_n_async([t], op="avg").wait(); ddl.allreduce(x, op="max")
assert np.array_equal(x, np.arange(6)) and torch.equal(t, torch.arange(4, dtype=torch.bfloat16))
assert rt.shm is None
gpu.nccl.process_group(rt, backend="gloo")  # what the runtime creates for device tensors (gloo stands in for NCCL)
assert dist.is_initialized()
ddl.finalize()
assert not dist.is_initialized(), "finalize left the process group it created"
print("OK")
"""


def test_one_rank_is_the_identity_and_finalize_destroys_the_process_group_it_created():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "PMI_", "OMPI_", "HYDRA_"))}
    env["PYTHONPATH"] = REPO
    proc = subprocess.run([sys.executable, "-c", SINGLE], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-2000:]
    assert "destroy_process_group" not in proc.stderr


SMALL_DEV_SHM = "32m"  # MPICH's own segments take ~10 MB of it for 2 ranks


def _small_dev_shm_prefix():
    """A private mount namespace with a SMALL_DEV_SHM tmpfs on /dev/shm (as a default Docker or
    Kubernetes container has: 64 MB), for the command that follows."""
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size={SMALL_DEV_SHM} tmpfs /dev/shm"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a small /dev/shm in a private namespace (needs root): {probe.stderr.strip()}")
    return ("unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size={SMALL_DEV_SHM} tmpfs /dev/shm && exec "$@"', "sh")


def test_a_small_dev_shm_falls_back_with_one_line_instead_of_sigbus(run_mpi):
    """/dev/shm smaller than the job's buffers: a window past its free space would map and then
    kill the rank with SIGBUS.  The arena, shared_zeros and result regions check the room
    first (all ranks alike), reduce through MPI / ordinary memory with the right values, and
    the host's first rank says so once per kind; what fits still uses shared memory.  A single
    tensor's allreduce is reduced when it returns; Horovod's negotiated allreduce reduces through MPI
    too, a large tensor where it lies."""
    result = run_mpi(2, "small_devshm_job.py", prefix=_small_dev_shm_prefix(), timeout=180)
    assert "Bus error" not in result.stdout + result.stderr
    summary = result.summary(2)
    for s in summary:
        assert s["arena_after_big"] < 32 << 20, s  # never grown to hold the 32 MB tensor
        assert s["arena_now"] >= 2 << 20, s  # the 2 MB one did get an arena
        assert not s["big_shared_zeros_in_heap"] and not s["results_in_heap"], s
        assert s["small_shared_zeros_in_heap"], s
        before, after, needed = s["exact_growth"]  # doubling did not fit; what the call needed did
        assert needed <= after < 2 * before, s
        assert s["hvd_inplace_peak"] < (32 << 20) // 4, s  # hvd.allreduce_ of 32 MB: reduced where it lies
    said = [line for line in result.stderr.splitlines() if "/dev/shm has" in line]
    # once per kind from the native group's first rank, and again from Horovod's own shared memory
    # (its arena and results: collectives/negotiated.py) when it finds no room either
    native, horovod = said[:3], said[3:]
    assert len(native) == 3 and len(horovod) <= 2, result.stderr[-3000:]
    assert all(" for shared_zeros of " not in line for line in horovod), said
    assert all(line.startswith("ddl_runtime: rank 0/2: /dev/shm has ") and "does not fit" in line
               and "DDL_SHM=0" in line for line in said), said
    assert [k for k in ("an arena of", "for shared_zeros of", "for results of") if any(k in line for line in native)] \
        == ["an arena of", "for shared_zeros of", "for results of"], said
