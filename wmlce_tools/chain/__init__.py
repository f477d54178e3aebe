"""Runs longer than one walltime (``wml submit --chain N``): N jobs, each depending on the
previous one, that checkpoint before their walltime and resume from one shared checkpoint
directory.  The names shared with the runtime live in ``ddl_runtime.checkpoint.protocol``.

- ``spec``: what a chain is (``Chain``, ``Segment``) and the checks made before anything is
  written or submitted.
- ``record``: the run's directory (``chain.json``: every segment's job id; what each segment
  ended with), read by ``wml jobs`` / ``status`` / ``logs``.
- ``submit``: submitting the segments (batch schedulers), or running them one after another
  (the local site).
- ``segment_end``: what a segment's job script runs when ddlrun has ended: FINISHED and
  cancelling the rest, or the line saying which segment resumes.
"""
