"""The runtime's per-rank records of a run, read (``records.py``), what they mean (``analysis.py``:
step and communication time, waiting for the last rank, stragglers and their node) and the one
line of it that ddlrun's end and ``wml status`` print (``endline.py``).  ``wml report`` (the
``report`` package, above the job side) builds its summary and page on these.

May import: the foundation modules (errors) and numpy; nothing of the job side.  Imported by
ddlrun, report and cli.
"""
