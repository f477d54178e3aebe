"""The chain package (a layer with `sweeps` and `stage`): a chain's data and its in-job step (``wml submit --chain N``): N jobs, each depending
on the previous one, that checkpoint before their walltime and resume from one shared
checkpoint directory.  The names shared with the runtime live in
``ddl_runtime.checkpoint.protocol``.

- ``spec``: what a chain is (``Chain``, ``Segment``) and the checks made before anything is
  written or submitted (the job script reads a ``Segment``).
- ``record``: the run's directory (``chain.json``: every segment's job id; what each segment
  ended with), read by ``wml jobs`` / ``status`` / ``logs``.
- ``segment``: the job script's one step (``exec python -m wmlce_tools.chain.segment ... --
  ddlrun ...``): the walltime timer, the stop signal passed to ddlrun and asked again until it
  ends, ddlrun's status, the staged env's end, then ``segment_end``.
- ``segment_end``: what a segment does when ddlrun has ended: FINISHED and cancelling the rest,
  or the line saying which segment resumes.

Submitting the segments is ``runs/chain.py``, the run's view ``runs/chain_view.py``, what
``wml submit --chain`` prints ``cli/chain.py``.  May import: ``schedulers`` and the layers
below it.  Never ``jobscript``, ``jobs``, ``runs`` or above.
"""
