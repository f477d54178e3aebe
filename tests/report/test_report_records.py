"""The runtime's per-rank record and what ``wml report`` reads from it, without MPI: the writer
(ddl_runtime/core/stats.py) on a made-up clock, the settings that place it, a 1,000-rank record
with one slow rank, and records that are partial or unreadable."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddl_runtime.core import stats as core_stats
from ddl_runtime.core.jobenv import JobEnvironment
from ddl_runtime.core.stats import RING, RunStats
from ddl_runtime.errors import DDLInputError
from wmlce_tools.errors import WmlError
from wmlce_tools.report import report, summary
from wmlce_tools.runstats.analysis import analyse, one_line
from wmlce_tools.runstats.records import load

REPO = Path(__file__).resolve().parents[2]


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_where_the_records_go_and_a_bad_interval_is_one_error():
    assert JobEnvironment.from_environ({"WML_JOB_DIR": "/jobs/j1"}).stats_dir == "/jobs/j1/stats"
    assert JobEnvironment.from_environ({"WML_JOB_DIR": "/jobs/j1", "DDL_STATS_DIR": "/t/s"}).stats_dir == "/t/s"
    assert JobEnvironment.from_environ({}).stats_dir is None
    with pytest.raises(DDLInputError, match="DDL_STATS_INTERVAL_S='soon' is not a number"):
        JobEnvironment.from_environ({"DDL_STATS_INTERVAL_S": "soon"})


@pytest.fixture
def counting():
    """A record the collectives count into (core/stats.py: CURRENT), put back afterwards."""
    before = core_stats.CURRENT
    yield
    core_stats.CURRENT = before


def test_a_step_is_counted_its_wait_kept_and_the_record_rewritten_every_interval(tmp_path, counting):
    clock = Clock()
    st = core_stats.CURRENT = RunStats(3, 8, str(tmp_path), interval_s=10.0, clock=clock)

    @core_stats.collective
    def reduction():          # 20 ms in a collective, 5 of them waiting for the last rank (2 ms behind)
        clock.now += 0.015
        st.arrived(st.arrival(), st.arrival() + 5_000_000)
        inner()

    @core_stats.collective
    def inner():              # nested: counted once
        clock.now += 0.005

    for i in range(RING + 5):
        clock.now += 0.08
        reduction()
        st.end_step(100)
        if i == 50:       # 5.1 s in: not yet
            assert not (tmp_path / "rank3.json").exists()
    data = json.loads((tmp_path / "rank3.json").read_text())
    assert data["status"] == "running" and data["rank"] == 3 and data["size"] == 8
    st.write("finished")
    rec = load(tmp_path)
    [r] = rec.ranks
    assert r.steps == RING + 5 and r.timed_steps == RING + 4 and r.bytes_reduced == 100 * (RING + 5)
    assert r.ring_first_step == 5 and len(r.compute) == RING
    assert r.compute == pytest.approx([0.08] * RING, abs=1e-6) and r.comm == pytest.approx([0.02] * RING, abs=1e-6)
    assert r.wait == pytest.approx([0.005] * RING, abs=1e-6) and r.arrivals == RING + 5 and r.measured_wait
    assert r.mean_step_s == pytest.approx(0.1) and r.mean_comm_s == pytest.approx(0.02)
    assert r.mean_wait_s == pytest.approx(0.005)
    assert rec.missing == [0, 1, 2, 4, 5, 6, 7] and rec.partial
    assert one_line(analyse(rec)).endswith("PARTIAL: no record from ranks 0-2,4-7 of 8")


def test_a_thousand_ranks_name_the_slow_one_and_its_node(tmp_path):
    # the benchmark's own writer (ddl_runtime's RunStats), 1,000 ranks x 30 steps, rank 617 at 1.3x
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "report_scale.py"), "--ranks", "1000",
                           "--steps", "30", "--repeat", "1", "--keep", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rep = report(str(tmp_path / "stats"))
    a = rep.main.analysis
    assert [s.rank for s in a.stragglers] == [617] and a.stragglers[0].node == "n0154"
    assert a.stragglers[0].excess_pct == pytest.approx(30, abs=5)
    assert a.stragglers[0].others_wait_ms == pytest.approx(30, abs=5)     # 1.3 x 100 ms - 100 ms
    waits = {r.rank: r.wait_ms for r in a.rows}
    assert waits[617] < 5 and min(w for k, w in waits.items() if k != 617) > 20
    assert "straggler: rank 617 on n0154" in summary(rep)


def test_an_unreadable_record_is_named_and_no_record_at_all_is_one_error(tmp_path):
    st = RunStats(0, 2, str(tmp_path))
    st.end_step()
    st.write("finished")
    (tmp_path / "rank1.json").write_text("{half")
    rec = load(tmp_path)
    assert rec.partial and rec.missing == [1] and rec.unreadable[0].startswith("rank1.json: ")
    assert "unreadable: rank1.json" in one_line(analyse(rec))
    empty = tmp_path / "empty"
    (empty / "stats").mkdir(parents=True)
    (empty / "job.sh").write_text("")
    with pytest.raises(WmlError, match=r"^job empty: ended; no records in .*/empty/stats: its ranks wrote none"):
        report(str(empty))


def test_reductions_end_steps_unless_a_callback_does_and_two_callbacks_count_once(counting):
    """Keras / TensorFlow (core/stats.py): a gradient reduction ends a step in a custom loop; a
    callback that claims the steps ends them instead, its step carrying the reductions' time and
    bytes; the last callback to claim counts (two in one fit: one step a batch); a batch that a
    resumed epoch passes over is no step."""
    clock = Clock()
    st = core_stats.CURRENT = RunStats(0, 2, None, clock=clock)

    @core_stats.collective
    def reduce(spent):
        clock.now += spent

    for _ in range(3):
        clock.now += 0.07
        reduce(0.03)
        st.reduced(40)
    assert st.steps == 3 and st.bytes_reduced == 120 and st.comm_s == pytest.approx(0.06)
    first, second = object(), object()
    st.claim_steps(first)
    st.claim_steps(second)
    clock.now += 0.07
    reduce(0.02)
    st.reduced(40)
    reduce(0.01)
    st.reduced(40)                # e.g. two reductions in one step: still one step
    assert st.steps == 3
    assert not st.ends_steps(first) and st.ends_steps(second)
    st.end_step()
    assert st.steps == 4 and st.bytes_reduced == 200 and st.comm_s == pytest.approx(0.09)
    st.passed()                   # a batch passed over: its end only moves the next step's start
    clock.now += 5.0
    st.end_step()
    assert st.steps == 4 and st.step_s == pytest.approx(0.3)
    st.release_steps(first)       # not the owner: nothing changes
    assert st.ends_steps(second)
    st.release_steps(second)
    clock.now += 0.1
    st.reduced(40)
    assert st.steps == 5 and st.step_s == pytest.approx(0.4)
    # no agreement carried an arrival here: no step measured its wait (NaN in the ring: wml report infers it)
    assert st.waited_steps == 0 and st.wait_s == 0 and all(w != w for w in st._wait_ring[:5])


def test_the_straggler_rule_holds_from_two_ranks_to_ten_thousand():
    """A rank's compute against the median of the *others'* (runstats/analysis.py): with 2 ranks
    the slower one when it exceeds the other by the threshold (a median of all would be their mean,
    and never exceeded by 10 %); at 10,000 ranks the one slow rank and nothing else; the others' median is exact for every rank (against a brute force)."""
    import numpy as np

    from wmlce_tools.runstats.analysis import find_stragglers, others_median

    assert find_stragglers(np.array([12.6, 46.8]))[0] == [1]           # issue 59's two ranks
    assert find_stragglers(np.array([46.8, 12.6]))[0] == [0]
    assert find_stragglers(np.array([10.0, 10.5]))[0] == []            # 5 %: within the threshold
    assert find_stragglers(np.array([10.0]))[0] == []
    assert find_stragglers(np.array([10.0, 10.2, 15.0]))[0] == [2]
    assert find_stragglers(np.array([15.0, 60.0, 15.5, 14.8]))[0] == [1]
    rng = np.random.default_rng(0)
    for n in range(2, 12):
        v = rng.normal(10, 1, n)
        assert np.allclose(others_median(v), [np.median(np.delete(v, i)) for i in range(n)])
    v = rng.normal(100.0, 1.0, 10_000)
    assert find_stragglers(v)[0] == []
    v[617] = 130.0
    found, med, pct = find_stragglers(v)
    assert found == [617] and abs(pct[617] - 30) < 1
