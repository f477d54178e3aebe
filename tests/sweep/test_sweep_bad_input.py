"""Bad input to ``wml sweep``, typed as a user would: ONE line on stderr, exit status != 0, no
traceback, and nothing written (no run directory, no job in the registry)."""
from __future__ import annotations

from pathlib import Path

import pytest

PROG = str(Path(__file__).resolve().parent / "programs" / "hold.py")

CASES = [
    ("unknown-name", ["--param", "lr=0.1,0.2", PROG, "{bs}"], "names {bs} but trial 0 has no parameter 'bs'"),
    ("empty-grid", [PROG, "1"], "empty sweep: give --param"),
    ("empty-value", ["--param", "lr=", PROG, "{lr}"], "every value must be non-empty"),
    ("over-array-limit", ["--site", "polaris", "-P", "p", "--param", "i=" + ",".join(map(str, range(101))), PROG, "{i}"],
     "101 trials is over polaris's limit of 100 per job array (https://docs.alcf.anl.gov/polaris/running-jobs/); "
     "run them packed in one job with --pack NODES"),
    ("cannot-fit", ["--nodes", "3", "--pack", "2", "--param", "a=1,2", PROG, "{a}"],
     "a trial needs 3 nodes but the packed allocation (2 node(s)) has 2: give --pack 3 or more"),
    ("max-running", ["--max-running", "0", "--param", "a=1,2", PROG, "{a}"], "--max-running must be an integer >= 1"),
    ("chain", ["--chain", "2", "--param", "a=1,2", PROG, "{a}"], "do not go with a sweep"),
    ("brace", ["--param", "a=1", PROG, "{a"], "write {{ and }} for literal braces"),
    ("bad-file", ["--params-file", "/nonexistent.yaml", PROG, "{a}"], "--params-file /nonexistent.yaml"),
]


@pytest.mark.parametrize("name, args, fragment", CASES, ids=[c[0] for c in CASES])
def test_one_line_nothing_written(run_wml, tmp_path, name, args, fragment):
    proc = run_wml("sweep", *args)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wml: error: ") and fragment in lines[0], proc.stderr
    assert not (tmp_path / "wml-jobs").exists()
    data = tmp_path / "home" / ".local" / "share" / "wml" / "jobs.sqlite"
    assert not data.exists()


def test_show_and_resume_of_an_unknown_run_and_a_bad_sort(run_wml, tmp_path):
    for args in (["sweep", "show", "nope-20260101-000000"], ["sweep", "resume", "nope-20260101-000000"],
                 ["sweep", "show", str(tmp_path), "--format", "xml"]):
        proc = run_wml(*args)
        assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
