"""The sweeps package (a layer with `chain` and `stage`): a sweep's data and its in-job runners (`wml sweep`, the
Python API): the grid and `{name}` (`grid.py`), the run directory (`record.py`: sweep.json,
trials/<i>/state.json), array directives per scheduler (`array.py`), a trial's share of a
node (`pack.py`), the in-job trial runner (`trial.py`: `python -m wmlce_tools.sweeps.trial`)
and the packed runner (`packed.py`).

Planning, submitting and viewing a sweep are `runs/sweep_plan.py`, `runs/sweep_submit.py`,
`runs/sweep_view.py`; the command is `cli/sweep.py` (the package is `sweeps`, so that
`from wmlce_tools import sweep, submit` stay the Python API's functions).  May import:
`ddlrun` and the layers below it.  Never `jobscript`, `jobs`, `runs` or above.
"""
