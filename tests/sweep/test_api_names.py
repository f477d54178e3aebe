"""`from wmlce_tools import submit, map, sweep, resume` gives the Python API's functions whatever the
program imported before (the job side's modules included): a submodule named like an API function
would take its place on the package once imported (it did: wmlce_tools.submit, wmlce_tools.sweep)."""
import subprocess
import sys

CODE = """
import importlib, inspect, pkgutil
import wmlce_tools
for info in pkgutil.walk_packages(wmlce_tools.__path__, "wmlce_tools."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)   # every module, as a long-lived program may have
from wmlce_tools import map, resume, submit, sweep
print(all(inspect.isfunction(f) for f in (map, resume, submit, sweep)))
"""


def test_api_names_are_functions_after_the_job_side_is_imported():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
