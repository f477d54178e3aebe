"""A chain whose checkpoint save overruns the signal margin (issue 60 item 13): the ranks take the
stop signal and begin saving, but the walltime comes first.  wml says the save overran, with the
figures (margin, when the save began, how long it had run), not that the program ignored the
signal; and a segment that made no progress stops the chain instead of every next segment being
cut short the same way.  Local site, for real (ddlrun, MPICH, ddl_runtime.checkpoint); the
batch schedulers' path (the next segment's step finds the cut-short save) by running that step."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

PROGRAM = Path(__file__).resolve().parent / "programs" / "slow_save.py"


def test_a_save_longer_than_the_margin_is_said_with_its_figures_and_the_chain_stops(run_wml, tmp_path):
    # the timer's signal 12 s into each segment, the walltime 8 s later; the save would take 120 s
    proc = run_wml("submit", "--chain", "3", "-t", "20s", "--signal-margin", "8s", "-J", "slow", "--json",
                   str(PROGRAM), "120", env={"WML_LOCAL_KILL_WAIT_S": "2"}, timeout=240)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in text, text[-3000:]
    assert "took no notice" not in text, text[-3000:]
    line = next(ln for ln in text.splitlines() if "reached its walltime while saving" in ln)
    assert line.startswith("wml: segment 1 of 3 reached its walltime while saving the checkpoint of step ")
    assert "the save overran the signal margin (SIGUSR1 came 8 s before the walltime (--signal-margin)" in line
    began = float(line.split("the ranks began the save ")[1].split(" s after it")[0])
    ran = float(line.split("it had run ")[1].split(" s when the walltime came")[0])
    assert 0 <= began < 8 and 0 < ran <= 8.5 and began + ran >= 6, line
    assert "give --signal-margin more than 8 s" in line
    info = json.loads(proc.stdout.splitlines()[-1])
    ckpt = Path(info["checkpoint_dir"])
    assert ("wml: the chain stops after segment 1 of 3: it made no progress (its last checkpoint is still none)"
            in text)
    assert f"wml submit --chain 2 --checkpoint-dir {ckpt} --signal-margin" in text
    assert [s["state"] for s in info["segments"]][:1] == ["TIMEOUT"] and len(info["segments"]) == 1
    assert not (ckpt / "saving.json").exists()            # told once: kept in the segment's directory
    cut = json.loads((Path(info["run_dir"]) / "segment-1" / "cut-save.json").read_text())
    assert cut["stop_asked"] <= cut["started"]
    seg2 = Path(info["run_dir"]) / "segment-2"
    assert not seg2.exists() or not any(seg2.iterdir())    # segment 2 never ran


def _batch_run(tmp_path: Path, latest_step, start_step, saving_step):
    """A chain's run directory as a batch scheduler leaves it when segment 1's job was ended at its
    walltime during a save: chain.json, segment-1/start.json, the checkpoint directory."""
    run, ckpt = tmp_path / "run", tmp_path / "run" / "checkpoints"
    (run / "segment-1").mkdir(parents=True)
    ckpt.mkdir()
    (run / "chain.json").write_text(json.dumps({
        "run_id": "run", "site": "local", "scheduler": "local", "length": 3, "checkpoint_dir": str(ckpt),
        "margin_s": 300, "segments": [{"index": i, "job_dir": str(run / f"segment-{i}")} for i in (1, 2, 3)]}))
    (run / "segment-1" / "start.json").write_text(json.dumps({"step": start_step, "time": time.time() - 3600}))
    if latest_step is not None:
        (ckpt / "latest.json").write_text(json.dumps({"step": latest_step, "save_s": 250.0}))
    now = time.time()
    (ckpt / "saving.json").write_text(json.dumps({"step": saving_step, "segment": 1, "started": now - 290,
                                                  "stop_asked": now - 298}))
    return run, ckpt


def _segment_step(run, ckpt, isolated_env):
    return subprocess.run([sys.executable, "-m", "wmlce_tools.chain.segment", str(run), "2", "--",
                           sys.executable, "-c", "print('ranks ran')"],
                          env={**isolated_env, "WML_CHECKPOINT_DIR": str(ckpt), "WML_CHAIN_LENGTH": "3",
                               "WML_RUN_ID": "run"}, capture_output=True, text=True, timeout=60)


def test_the_next_batch_segment_says_so_and_stops_a_chain_without_progress(tmp_path, isolated_env):
    run, ckpt = _batch_run(tmp_path, latest_step=40, start_step=40, saving_step=80)
    out = _segment_step(run, ckpt, isolated_env)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ranks ran" not in out.stdout
    assert ("wml: segment 1 of 3 reached its walltime while saving the checkpoint of step 80: the save overran the "
            "signal margin (SIGUSR1 came 300 s before the walltime (--signal-margin); the ranks began the save 8.0 s "
            "after it; it never completed (the job ended at its walltime); the last complete save (step 40) took "
            "250.0 s)") in out.stdout
    assert "wml: the chain stops after segment 1 of 3: it made no progress (its last checkpoint is still step 40)" \
        in out.stdout
    assert json.loads((run / "segment-2" / "end.json").read_text())["status"] == 1


def test_the_next_batch_segment_goes_on_when_the_cut_segment_made_progress(tmp_path, isolated_env):
    run, ckpt = _batch_run(tmp_path, latest_step=60, start_step=40, saving_step=80)
    out = _segment_step(run, ckpt, isolated_env)
    assert "reached its walltime while saving the checkpoint of step 80" in out.stdout
    assert "the chain stops" not in out.stdout and "ranks ran" in out.stdout
    assert (run / "segment-1" / "cut-save.json").exists() and not (ckpt / "saving.json").exists()
    assert json.loads((run / "segment-2" / "start.json").read_text())["step"] == 60
