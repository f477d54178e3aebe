"""ddl_runtime.checkpoint's core on 2 real MPI ranks: what is kept, and one clear line on every rank
for each fault, before anything is overwritten."""
from __future__ import annotations

import json
from pathlib import Path

from helpers.mpi import run_script

PROGRAM = Path(__file__).resolve().parent / "programs" / "core_cases.py"


def _run(case: str, directory: Path, results: Path) -> list:
    """Both ranks' result lines of programs/core_cases.py CASE (results are written under `results`)."""
    results = results / f"results-{case}"
    results.mkdir(exist_ok=True)
    job = run_script(2, PROGRAM, case, str(directory), str(results), timeout=60)
    assert job.returncode == 0, job.stderr[-3000:]
    return [(results / f"rank{r}").read_text() for r in range(2)]


def _same_error(lines: list) -> str:
    """Both ranks raised, with the same one-line message; returns it."""
    assert all(line.startswith("ERROR ") for line in lines), lines
    messages = {line.split(" ", 2)[2] for line in lines}
    assert len(messages) == 1, lines
    return messages.pop()


def test_saves_keep_the_last_two_checkpoints_and_load_returns_the_newest(tmp_path):
    assert _run("save", tmp_path, tmp_path) == ["OK 0 saved", "OK 1 saved"]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["latest.json", "step-00000002.json",
                                                                "step-00000003.json"]
    assert len(list(tmp_path.glob("*.ckpt"))) == 2 and not list(tmp_path.glob(".tmp-*"))
    latest = json.loads((tmp_path / "latest.json").read_text())
    assert latest["step"] == 3 and Path(latest["path"]).is_file()
    assert _run("load", tmp_path, tmp_path) == ["OK 0 3 [3.0, 3.0, 3.0, 3.0]", "OK 1 3 [3.0, 3.0, 3.0, 3.0]"]


def test_a_corrupt_checkpoint_is_one_error_on_every_rank_naming_the_intact_previous_one(tmp_path):
    _run("save", tmp_path, tmp_path)
    payload = Path(json.loads((tmp_path / "latest.json").read_text())["path"])
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    message = _same_error(_run("load", tmp_path, tmp_path))
    assert message.startswith("CheckpointError: ") and str(payload) in message and "corrupt" in message
    assert "previous checkpoint (step 2) is intact" in message
    payload.unlink()  # partial: the payload is gone
    assert "unreadable" in _same_error(_run("load", tmp_path, tmp_path))


def test_ranks_that_would_restore_different_steps_fail_together(tmp_path):
    message = _same_error(_run("unshared", tmp_path, tmp_path))
    assert "rank 0: step 3, rank 1: none" in message and "shares" in message


def test_a_directory_that_cannot_be_written_fails_at_load_on_every_rank(tmp_path):
    (tmp_path / "file").write_text("")  # root writes anywhere: a path under a file cannot be a directory
    message = _same_error(_run("load", tmp_path / "file" / "ckpt", tmp_path))
    assert message.startswith("CheckpointError: checkpoint directory ") and "is not writable" in message


def test_save_and_agree_at_different_steps_fail_on_every_rank(tmp_path):
    assert "rank 0: 5, rank 1: 6" in _same_error(_run("save-steps", tmp_path, tmp_path))
    assert not list(tmp_path.glob("*.json"))  # nothing written
    assert "different steps (step 7 to step 8)" in _same_error(_run("agree-steps", tmp_path, tmp_path))
