"""What a chained job (``wml submit --chain N``) and the runtime agree on, in one place.

The job side (wmlce_tools: scheduler directives, the job script, ddlrun) and the runtime side
(ddl_runtime.checkpoint: the stop agreement, saving and resuming) meet only here.  wmlce_tools
may import this module; ddl_runtime never imports wmlce_tools.

- The job script exports ``CHECKPOINT_DIR_ENV`` (absolute), ``STOP_SIGNAL_ENV`` (a signal
  name such as ``USR1``), ``SEGMENT_ENV`` (1-based), ``CHAIN_LENGTH_ENV`` and ``RUN_ID_ENV``
  to every rank.
- A margin before the walltime the scheduler (or the job script's own timer) sends that
  signal; the job script forwards it to ddlrun, ddlrun to every rank.  Any rank that got it
  counts as a request: the runtime turns it into one decision at one step boundary.
- A program that saved its checkpoint and stopped for the walltime exits with
  ``EXIT_RESUME`` (75, EX_TEMPFAIL: "try again later"); ddlrun passes that status on.
  Status 0 means the run is finished; anything else is a failure (the next segment, which
  depends on this one with afterany, resumes from the last good checkpoint).
- Rank 0 keeps ``LATEST_FILE`` (JSON: step, segment, path, time, framework) in the
  checkpoint directory, replaced atomically after the checkpoint it names is complete;
  ``wml jobs`` / ``wml status`` read the step from it.
- The segment that finishes the run writes ``FINISHED_FILE`` there; a segment that starts and
  finds it exits at once.
- While rank 0 writes a checkpoint, ``SAVING_FILE`` there names it (JSON: step, segment, started,
  and stop_asked: when rank 0 got the stop signal, if it did); it goes once ``LATEST_FILE`` names
  the new checkpoint, or the save failed.  One left when a segment's job has ended is a save that
  the walltime cut short: the job side says so, with the figures.  ``LATEST_FILE`` also carries
  ``save_s``, the seconds the save took.
"""
from __future__ import annotations

CHECKPOINT_DIR_ENV = "WML_CHECKPOINT_DIR"
STOP_SIGNAL_ENV = "WML_STOP_SIGNAL"
SEGMENT_ENV = "WML_CHAIN_SEGMENT"
CHAIN_LENGTH_ENV = "WML_CHAIN_LENGTH"
RUN_ID_ENV = "WML_RUN_ID"

EXIT_RESUME = 75

LATEST_FILE = "latest.json"
FINISHED_FILE = "FINISHED"
SAVING_FILE = "saving.json"
