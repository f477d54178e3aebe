"""Not imported: this directory goes on PYTHONPATH (see ddl_runtime.horovod.shim); the
file only makes setuptools ship the ``horovod`` alias package below it."""
