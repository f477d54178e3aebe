"""Table tests: every scheduler's status / cancel / submit parsers against recorded replies
(tests/jobs/recorded/, see its README for where each format comes from)."""
from __future__ import annotations

from pathlib import Path

import pytest

from wmlce_tools.errors import WmlError
from wmlce_tools.schedulers.states import JobState
from wmlce_tools.schedulers import (CANCEL_FINISHED, CANCEL_REQUESTED, CANCEL_UNKNOWN, SchedulerError,
                                    get_scheduler)

REC = Path(__file__).parent / "recorded"
P, R, C, F, X, T, U = (JobState.PENDING, JobState.RUNNING, JobState.COMPLETED, JobState.FAILED,
                       JobState.CANCELLED, JobState.TIMEOUT, JobState.UNKNOWN)


def sample(name: str):
    """(stdout, stderr, returncode) of a recorded reply."""
    base = REC / name
    read = lambda ext: base.with_name(base.name + ext).read_text() if base.with_name(base.name + ext).exists() else ""
    out, err, rc = read(".out"), read(".err"), read(".rc")
    assert out or err or rc, f"no recorded sample {name}"
    return out, err, int(rc) if rc.strip() else 0


def test_every_recorded_sample_is_used():
    names = {p.parent.name + "/" + p.name.rsplit(".", 1)[0] for p in REC.glob("*/*") if p.suffix in (".out", ".err", ".rc")}
    used = {c[1] for c in STATUS_CASES} | {c[1] for c in CANCEL_CASES} | set(SUBMIT_CASES) | set(OTHER_SAMPLES)
    assert names - used == set(), f"recorded but not tested: {sorted(names - used)}"


# (scheduler, sample, parser method, expected (state, exit code) or None: "ask the next source")
STATUS_CASES = [
    ("slurm", "slurm/squeue-pending-dependency", "parse_status", (P, None, "Dependency")),
    ("slurm", "slurm/squeue-dependency-never-satisfied", "parse_status", (P, None, "DependencyNeverSatisfied")),
    ("slurm", "slurm/squeue-running", "parse_status", (R, None)),
    ("slurm", "slurm/squeue-unknown", "parse_status", None),
    ("slurm", "slurm/scontrol-pending", "parse_scontrol", (P, None)),
    ("slurm", "slurm/scontrol-running", "parse_scontrol", (R, None)),
    ("slurm", "slurm/scontrol-completed", "parse_scontrol", (C, 0)),
    ("slurm", "slurm/scontrol-failed", "parse_scontrol", (F, 3)),
    ("slurm", "slurm/scontrol-signal", "parse_scontrol", (F, 139)),
    ("slurm", "slurm/scontrol-cancelled", "parse_scontrol", (X, 143)),
    ("slurm", "slurm/scontrol-timeout", "parse_scontrol", (T, 143)),
    ("slurm", "slurm/scontrol-unknown", "parse_scontrol", None),
    ("slurm", "slurm/sacct-disabled", "parse_sacct", None),
    ("slurm", "slurm/sacct-c-completed", "parse_sacct", (C, 0)),
    ("slurm", "slurm/sacct-c-failed", "parse_sacct", (F, 3)),
    ("slurm", "slurm/sacct-c-signal", "parse_sacct", (F, 139)),
    ("slurm", "slurm/sacct-c-cancelled", "parse_sacct", (X, 0)),
    ("slurm", "slurm/sacct-c-timeout", "parse_sacct", (T, 0)),
    ("lsf", "lsf/bjobs-o-pend", "parse_status", (P, None)),
    ("lsf", "lsf/bjobs-o-psusp", "parse_status", (P, None)),
    ("lsf", "lsf/bjobs-o-run", "parse_status", (R, None)),
    ("lsf", "lsf/bjobs-o-ususp", "parse_status", (R, None)),
    ("lsf", "lsf/bjobs-o-ssusp", "parse_status", (R, None)),
    ("lsf", "lsf/bjobs-o-done", "parse_status", (C, 0)),
    ("lsf", "lsf/bjobs-o-exit", "parse_status", (F, 3)),
    ("lsf", "lsf/bjobs-o-zombi", "parse_status", (F, 130)),
    ("lsf", "lsf/bjobs-o-unkwn", "parse_status", (U, None)),
    ("lsf", "lsf/bjobs-table-run", "parse_status", (R, None)),
    ("lsf", "lsf/bjobs-table-pend", "parse_status", (P, None)),
    ("lsf", "lsf/bjobs-not-found", "parse_status", None),
    ("lsf", "lsf/job-report-done", "parse_job_report", (C, 0)),
    ("lsf", "lsf/job-report-exit", "parse_job_report", (F, 3)),
    ("lsf", "lsf/job-report-killed", "parse_job_report", (X, 130)),
    ("lsf", "lsf/job-report-runlimit", "parse_job_report", (T, 140)),
    ("cobalt", "cobalt/qstat-f-queued", "parse_status", (P, None)),
    ("cobalt", "cobalt/qstat-f-user_hold", "parse_status", (P, None)),
    ("cobalt", "cobalt/qstat-f-dep_hold", "parse_status", (P, None)),
    ("cobalt", "cobalt/qstat-f-starting", "parse_status", (R, None)),
    ("cobalt", "cobalt/qstat-f-running", "parse_status", (R, None)),
    ("cobalt", "cobalt/qstat-f-exiting", "parse_status", (R, None)),
    ("cobalt", "cobalt/qstat-f-killing", "parse_status", (X, None)),
    ("cobalt", "cobalt/qstat-f-dep_fail", "parse_status", (F, None)),
    ("cobalt", "cobalt/qstat-default-running", "parse_status", (R, None)),
    ("cobalt", "cobalt/qstat-l-queued", "parse_status", (P, None)),
    ("cobalt", "cobalt/qstat-f-finished", "parse_status", None),
    ("pbs", "pbs/qstat-xf-json-queued", "parse_status", (P, None)),
    ("pbs", "pbs/qstat-xf-json-held-depend", "parse_status", (P, None)),
    ("pbs", "pbs/qstat-xf-json-running", "parse_status", (R, None)),
    ("pbs", "pbs/qstat-xf-json-raw-tab", "parse_status", (R, None)),
    ("pbs", "pbs/qstat-xf-json-exiting", "parse_status", (R, None)),
    ("pbs", "pbs/qstat-xf-json-finished-ok", "parse_status", (C, 0)),
    ("pbs", "pbs/qstat-xf-json-finished-failed", "parse_status", (F, 3)),
    ("pbs", "pbs/qstat-xf-json-bad-escape", "parse_status", (F, 3)),
    ("pbs", "pbs/qstat-xf-json-walltime", "parse_status", (T, None)),
    ("pbs", "pbs/qstat-xf-json-killed-sigterm-walltime", "parse_status", (T, 143)),
    ("pbs", "pbs/qstat-xf-json-qdel-running", "parse_status", (X, 143)),
    ("pbs", "pbs/qstat-xf-json-qdel-queued", "parse_status", (X, None)),
    ("pbs", "pbs/qstat-unknown", "parse_status", None),
]


@pytest.mark.parametrize("sched,name,method,expected", STATUS_CASES, ids=[c[1] for c in STATUS_CASES])
def test_status_parsers(sched, name, method, expected):
    s = get_scheduler(sched)
    out, err, rc = sample(name)
    if method == "parse_job_report":
        assert s.parse_job_report(out) == expected
    elif method == "parse_sacct":
        assert s.parse_sacct(out, err, rc, job_id=out.split("|")[0] if out else "") == expected
    else:
        assert getattr(s, method)(out, err, rc) == expected


CANCEL_CASES = [
    ("slurm", "slurm/scancel-running", CANCEL_REQUESTED),
    ("lsf", "lsf/bkill-terminated", CANCEL_REQUESTED),
    ("lsf", "lsf/bkill-finished", CANCEL_FINISHED),
    ("lsf", "lsf/bkill-no-matching", CANCEL_UNKNOWN),
    ("cobalt", "cobalt/qdel-deleted", CANCEL_REQUESTED),
    ("cobalt", "cobalt/qdel-not-found", CANCEL_UNKNOWN),
    ("pbs", "pbs/qdel-running", CANCEL_REQUESTED),
    ("pbs", "pbs/qdel-finished", CANCEL_FINISHED),
    ("pbs", "pbs/qdel-unknown", CANCEL_UNKNOWN),
]


@pytest.mark.parametrize("sched,name,expected", CANCEL_CASES, ids=[c[1] for c in CANCEL_CASES])
def test_cancel_parsers(sched, name, expected):
    out, err, rc = sample(name) if (REC / (name + ".out")).exists() or (REC / (name + ".err")).exists() else ("", "", 0)
    assert get_scheduler(sched).parse_cancel(out, err, rc) == expected


def test_scancel_silent_reply_is_a_request():
    # recorded: scancel prints nothing and exits 0, for a running, finished or unknown job
    assert get_scheduler("slurm").parse_cancel("", "", 0) == CANCEL_REQUESTED
    assert get_scheduler("slurm").parse_cancel(
        "", "scancel: error: Kill job error on job id 5: Job/step already completing or completed\n", 1) == CANCEL_FINISHED
    assert get_scheduler("slurm").parse_cancel(
        "", "scancel: error: Kill job error on job id 99: Invalid job id specified\n", 1) == CANCEL_UNKNOWN


SUBMIT_CASES = {
    "lsf/bsub-reply": ("lsf", "701106"),
    "lsf/bsub-reply-queue": ("lsf", "701107"),
    "cobalt/qsub-reply": ("cobalt", "351457"),
    "cobalt/qsub-reply-routed": ("cobalt", "351457"),
    "pbs/qsub-reply": ("pbs", "1234567.polaris-pbs-01.hsn.cm.polaris.alcf.anl.gov"),
}


@pytest.mark.parametrize("name", sorted(SUBMIT_CASES))
def test_submit_replies(name):
    sched, job_id = SUBMIT_CASES[name]
    assert get_scheduler(sched).parse_submit(sample(name)[0]) == job_id


# Failures of the scheduler itself: a SchedulerError (one line naming the tool), never "no such job"
DOWN_CASES = [
    ("slurm", "slurm/squeue-controller-down", "parse_status", "Unable to contact slurm controller"),
    ("lsf", "lsf/bjobs-lsf-down", "parse_status", "LSF is down"),
    ("cobalt", "cobalt/qstat-no-queue-manager", "parse_status", "Failed to connect to queue manager"),
    ("slurm", "slurm/scancel-controller-down", "parse_cancel", "Unable to contact slurm controller"),
    ("pbs", "pbs/qstat-server-down", "parse_status", "cannot connect to server"),
]
OTHER_SAMPLES = [c[1] for c in DOWN_CASES] + [
    "slurm/sbatch-controller-down", "slurm/sbatch-invalid-partition",
    "cobalt/job-completed", "cobalt/job-failed", "cobalt/job-running",
]


@pytest.mark.parametrize("sched,name,method,words", DOWN_CASES, ids=[c[1] for c in DOWN_CASES])
def test_scheduler_down_is_an_error_not_unknown(sched, name, method, words):
    out, err, rc = sample(name)
    with pytest.raises(SchedulerError) as e:
        getattr(get_scheduler(sched), method)(out, err, rc)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_cobaltlog(tmp_path):
    cob = get_scheduler("cobalt")
    for name, expected in (("job-completed", (C, 0)), ("job-failed", (F, 3)), ("job-running", None)):
        text = (REC / "cobalt" / f"{name}.cobaltlog").read_text()
        assert cob.parse_cobaltlog(text) == expected
        # found beside the -O prefix's output files
        d = tmp_path / name
        d.mkdir()
        (d / "ddl_test.cobaltlog").write_text(text)
        assert cob.status_from_files(str(d / "ddl_test.output"), str(d / "ddl_test.error"), d, "351457") == expected


def test_lsf_report_read_from_output_file(tmp_path):
    lsf = get_scheduler("lsf")
    out = tmp_path / "ddl_test.701106.out"
    out.write_text(sample("lsf/job-report-exit")[0])
    assert lsf.status_from_files(str(out), str(tmp_path / "missing.err"), tmp_path, "701106") == (F, 3)
    assert lsf.status_from_files(str(tmp_path / "none"), str(tmp_path / "none2"), tmp_path, "1") is None


def test_sbatch_rejection_message_is_kept_by_submit():
    # the foundation's submit quotes the tool's own words (tests/slurm exercises it for real)
    out, err, rc = sample("slurm/sbatch-invalid-partition")
    assert rc != 0 and "Invalid partition name specified" in err
    out, err, rc = sample("slurm/sbatch-controller-down")
    assert rc != 0 and "Unable to contact slurm controller" in err


def test_every_native_state_maps_into_the_one_set():
    from wmlce_tools.schedulers import cobalt, lsf, slurm

    for table in (slurm.STATES, lsf.STATES, cobalt.STATES):
        for native, ours in table.items():
            assert JobState[ours] in JobState, native
    assert slurm.map_state("CANCELLED by 0") == X
    assert slurm.map_state("COMPLETED+") == C
    assert slurm.map_state("SOMETHING_NEW") == U
    assert lsf.map_state("WHATEVER") == U
    assert cobalt.map_state("weird") == U


def test_status_and_cancel_argv():
    assert get_scheduler("slurm").status_argv("12") == ["squeue", "-h", "-j", "12", "-o", "%T|%r"]
    assert get_scheduler("slurm").cancel_argv("12") == ["scancel", "12"]
    assert get_scheduler("lsf").status_argv("12") == ["bjobs", "-noheader", "-o", "stat exit_code", "12"]
    assert get_scheduler("lsf").cancel_argv("12") == ["bkill", "12"]
    assert get_scheduler("cobalt").status_argv("12") == ["qstat", "-f", "12"]
    assert get_scheduler("cobalt").cancel_argv("12") == ["qdel", "12"]
    with pytest.raises(WmlError):
        get_scheduler("local").cancel_argv("local-x")


def test_no_slurm_configuration_names_the_fix():
    err = ("squeue: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
           "squeue: error: fetch_config: DNS SRV lookup failed\n"
           "squeue: error: _establish_config_source: failed to fetch config\n"
           "squeue: fatal: Could not establish a configuration source\n")
    with pytest.raises(SchedulerError) as e:
        get_scheduler("slurm").parse_status("", err, 1)
    assert str(e.value).startswith("squeue failed: squeue: fatal: Could not establish a configuration source")
    assert "SLURM_CONF" in str(e.value)
