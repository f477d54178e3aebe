"""The job's communication environment, from the site profile's ``fabric:`` section
(``wmlce_tools/site/fabric.py``): which modules, variables, container binds and runtime switches a
job gets for its case (``resolve``), and the look for the network plugin on a node (``probe``:
standard library only, it runs on every node through ``ddlrun --check``; ``check``: its lines).
The launch plan (``wmlce_tools/launch``) takes the case as it takes the profile's other values.

May import: site, quoting and the foundation modules.  Imported by the launch plan and ddlrun."""
