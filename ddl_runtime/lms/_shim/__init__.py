"""Not imported: this directory goes on PYTHONPATH (see ddl_runtime.lms.shim); the file only
makes setuptools ship the ``sitecustomize`` and ``tensorflow_large_model_support`` below it."""
