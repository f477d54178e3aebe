"""Package layout that pyproject.toml cannot express on its own.

The repository keeps ``templates/``, ``site_configs/`` and ``env_specs/`` at the top level
(they are data that sites edit), but an installed wml must find them, so they are shipped
as the sub-packages ``wmlce_tools.templates`` etc.  ``wmlce_tools.resources`` finds them in
both layouts.
"""
from setuptools import find_packages, setup

DATA_DIRS = {
    "wmlce_tools.templates": "templates",
    "wmlce_tools.site_configs": "site_configs",
    "wmlce_tools.env_specs": "env_specs",
}

setup(
    packages=find_packages(include=["wmlce_tools", "wmlce_tools.*", "ddl_runtime", "ddl_runtime.*"])
    + list(DATA_DIRS),
    package_dir=DATA_DIRS,
    package_data={name: ["*.j2", "*.yaml", "*.yml", "*.md"] for name in DATA_DIRS},
    py_modules=["ddl"],
)
