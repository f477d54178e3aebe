"""Horovod's API on ddl_runtime: `import ddl_runtime.horovod.torch as hvd`.

Scripts written for Horovod run unchanged: `ddl_runtime.horovod.torch`, `.tensorflow`,
`.tensorflow.keras` and `.keras` offer Horovod's functions with Horovod's documented
semantics (name-negotiated collectives, process sets, join), on ddl_runtime's MPI
communicators.  Under `ddlrun --horovod` plain `import horovod.torch` resolves here too.
Importing this package imports neither MPI nor a framework.
"""
