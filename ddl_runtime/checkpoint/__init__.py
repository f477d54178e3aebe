"""Training that outlives one job: the stop agreement, atomic checkpoints, resume (see protocol.py)."""
