"""The framework bindings' own modules, below their public faces at the package's top.

* tensorflow.py: DDL's collectives on tf.Tensor / tf.Variable (eagerly and in tf.function).
  Its public face is ddl_runtime.tensorflow, which sits above ddl_runtime.keras (Keras' optimizer
  builds on these collectives, and ddl_runtime.tensorflow.DistributedOptimizer is Keras').

ddl_runtime.torch and ddl_runtime.keras live at the top themselves (nothing below them needs
to be split off).

May import: checkpoint/ and everything below it (collectives, state, transports, engine,
core), ddl_runtime.lms.  Not ddl_runtime.keras, ddl_runtime.tensorflow or the APIs
(docs/ARCHITECTURE.md, pyproject.toml).
"""
