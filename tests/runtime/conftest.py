"""Helpers for ddl_runtime tests: real MPI jobs launched with mpiexec (pip's MPICH)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.mpi import MpiJob, openmpi_available, run_script

SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"


class MpiResult(MpiJob):
    def lines(self, prefix: str) -> list:
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]

    def json_lines(self, prefix: str) -> list:
        return [json.loads(line[len(prefix):]) for line in self.lines(prefix)]

    def topologies(self) -> list:
        (summary,) = self.json_lines("SUMMARY ")
        return summary

    def summary(self, n: int) -> list:
        """The verdict of a script that prints one SUMMARY line (rank 0, every rank's dict with
        its `failures`): exit 0, a dict from all n ranks, no failures; returns the dicts."""
        summaries = self.json_lines("SUMMARY ")
        assert len(summaries) == 1, self.stdout[-3000:] + self.stderr[-3000:]
        ranks = summaries[0]
        assert sorted(t["rank"] for t in ranks) == list(range(n))
        failures = [f"rank {t['rank']}: {f}" for t in ranks for f in t["failures"]]
        assert not failures, "\n".join(failures[:50])
        assert self.returncode == 0, self.stderr[-3000:]
        return ranks

    def assert_ended_early(self, message: str | None, unreached: str, within: float = 30) -> None:
        """A job with a failing rank ended: non-zero, within `within` seconds, no rank printed
        `unreached` (what follows the failure), and stderr says `message` when one is given."""
        assert self.returncode != 0
        assert self.seconds < within, f"took {self.seconds:.1f} s"
        assert not self.lines(unreached)
        if message:
            assert message in self.stderr, self.stderr[-2000:]

    def assert_all_ok(self, n: int) -> None:
        """check_collectives.py's verdict (summary)."""
        self.summary(n)


def mpirun(n: int, script: str, *args: str, env: dict | None = None, timeout: float = 90,
           mpi: str = "mpich", prefix: tuple = ()) -> MpiResult:
    """Run mpi_scripts/<script> on n ranks; DDL_* (and launcher) variables come only from `env`."""
    return run_script(n, SCRIPTS / script, *args, env=env, timeout=timeout, mpi=mpi, result=MpiResult,
                      prefix=prefix)


@pytest.fixture
def run_mpi():
    return mpirun


@pytest.fixture
def openmpi():
    """Skips when Debian's Open MPI is absent (it is an optional second MPI: apt-get install openmpi-bin)."""
    if not openmpi_available():
        pytest.skip("Debian's Open MPI is not installed (apt-get install openmpi-bin)")
    return "openmpi"
