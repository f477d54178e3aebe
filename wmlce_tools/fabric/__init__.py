"""The job's communication environment, from the site profile's ``fabric:`` section
(``wmlce_tools/site/fabric.py``): which modules and variables a job gets for its case
(``resolve``), the job script's lines (``script``), what a container must bind and pass in
(``container``), and the look for the network plugin on a node (``probe``: standard library
only, it runs on every node through ``ddlrun --check``).

May import: site, quoting and the foundation modules.  Imported by jobscript, ddlrun and container."""
