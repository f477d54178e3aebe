"""The runs layer: what `wml submit`, `--script`, `--chain N`, `wml sweep` and `wml interactive`
do once a job is planned: write the job directory, submit it, record it, and read a run back.

- `submission`: the job directory, submitting a rendered script (or running it on the local
  site), reading the scheduler's reply;
- `script` (`wml submit --script job.sh`), `interactive` (`wml interactive`);
- `chain`: planning and submitting a chain's segments with their dependencies; `chain_view`:
  a chained run as `wml jobs/status/logs` show it;
- `sweep_plan` (array or packed and why, every check before anything is written),
  `sweep_submit` (the run directory and its job), `sweep_view` (`wml sweep show`, and a sweep
  in `wml jobs/status/logs/cancel`).

May import: `jobs` and `jobscript` and every layer below them (`chain`, `sweeps`, `stage`,
`ddlrun`, `schedulers`, `launchers`, `env`, `layout`, `site`, the foundation).  Never
`options`, `api` or `cli`.
"""
