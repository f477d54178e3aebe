"""The run report names a slow rank wherever the others wait for it (issue 59): real ranks under
pip's MPICH, every rank sleeping 20 ms a step for its data and one rank 70 ms, the records read
by ``wml report DIR --html`` and the page opened in Debian's headless Chromium.

The others' wait for the slow rank happens where their collectives block: a slow data loader
(before the forward pass) holds them in the gradient hooks inside ``loss.backward()``, on the
shared-memory path (one host) and the MPI path (two emulated nodes); a rank slow after its
backward holds them in ``step()`` or in the next step's hooks.  Every case must show the slow
rank's compute (its own work: about 70 ms) above the others' (about 20 ms), name it the one
straggler with its node, and show the others' measured wait for it (about 50 ms a step), through
ddl_runtime's DistributedOptimizer, horovod.torch's and a Keras fit, and with 2 ranks, where a
median of two is their mean."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.mpi import REPO, run_script
from helpers.page import drawn

PROGRAMS = Path(__file__).parent / "programs"
STEPS = 30
# id: (ranks, emulated nodes, program, its arguments, the slow rank)
CASES = {
    "ddl-loader-one-host": (4, 1, "slow_rank.py", ("ddl", "loader"), 2),
    "ddl-loader-two-nodes": (4, 2, "slow_rank.py", ("ddl", "loader"), 2),
    "ddl-after-backward-one-host": (4, 1, "slow_rank.py", ("ddl", "after-backward"), 1),
    "ddl-two-ranks-two-nodes": (2, 2, "slow_rank.py", ("ddl", "loader"), 1),
    "hvd-loader-one-host": (4, 1, "slow_rank.py", ("hvd", "loader"), 2),
    "keras-fit-two-ranks": (2, 1, "keras_slow.py", (), 1),
}


def _run(tmp_path: Path, ranks: int, nodes: int, program: str, args: tuple, slow: int) -> Path:
    stats = tmp_path / "stats"
    env = {"DDL_STATS_DIR": str(stats), "KERAS_BACKEND": "torch", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if nodes > 1:
        env["DDL_EMULATE_NODES"] = str(nodes)
    argv = (str(STEPS), *args, str(slow)) if program == "slow_rank.py" else (str(STEPS), str(slow))
    job = run_script(ranks, PROGRAMS / program, *argv, env=env, timeout=240)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    return stats


@pytest.mark.parametrize("case", list(CASES))
def test_the_slow_rank_is_named_and_the_others_wait_for_it_counted_where_it_happens(tmp_path, case):
    ranks, nodes, program, args, slow = CASES[case]
    stats = _run(tmp_path, ranks, nodes, program, args, slow)
    page = tmp_path / "page.html"
    proc = subprocess.run([sys.executable, "-m", "wmlce_tools", "report", str(stats), "--html", str(page)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    out = proc.stdout
    where = f"node {slow * nodes // ranks} (" if nodes > 1 else socket.gethostname()
    # the terminal: what ran first, then the one straggler with its node and the others' wait
    assert out.splitlines()[0].startswith(f"job directory {stats}: "), out
    assert f"{program} {STEPS}" in out.split("\n\n")[0] and f"{nodes} node" in out, out
    found = re.findall(r"straggler: rank (\d+) on ([^:]+): compute ([\d.]+) ms a step, \+(\d+) % on the others' "
                       r"median \(([\d.]+) ms\); the others waited ([\d.]+) ms a step", " ".join(out.split()))
    assert len(found) == 1, out
    rank, node, compute, pct, others, waited = found[0]
    assert int(rank) == slow and node.startswith(where), out
    assert float(compute) >= 50 and float(others) < 0.6 * float(compute) and int(pct) >= 50, out
    assert float(waited) >= 25, out
    assert re.search(rf"slowest rank {slow} on .*\+\d+ % \(a straggler", " ".join(out.split())), out
    # the same from the Python API: every other rank waited, measured; the slow rank did not
    from wmlce_tools.report import report

    a = report(str(stats)).main.analysis
    assert a.wait_measured
    rows = {r.rank: r for r in a.rows}
    assert all(rows[r].wait_ms >= 25 and rows[r].compute_ms < 0.6 * rows[slow].compute_ms
               for r in rows if r != slow), a.rows
    assert rows[slow].wait_ms < 0.5 * min(rows[r].wait_ms for r in rows if r != slow), a.rows
    # the page, as a browser draws it
    text = page.read_text()
    assert f"rank {slow} (straggler)" in text and f"straggler: rank {slow}" in text
    assert "<td>" + str(slow) + "</td>" in text.split("<h2>Stragglers</h2>", 1)[1].split("</table>", 1)[0]
    marks = drawn(page)
    assert set(marks) == {"layout", "ranks", "steps"}, marks
    assert marks["layout"] >= 1 and marks["ranks"] >= 2 * ranks and marks["steps"] >= 4, marks


def _env() -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDL_", "WML_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    return env
