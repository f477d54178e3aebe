"""One host's shared-memory transport: the collectives of a job whose ranks share one node.

* group.py: `ShmGroup`, the MPI-3 shared windows (control block, arena) a one-node job opens,
  the signature agreement and the allreduce algorithms through them (`open_group`).
* heap.py: `SharedHeap`, tensors that live in shared memory (`ddl_runtime.shared_zeros`), so the
  reduction reads them where they are.
* results.py: `SharedResults`, out-of-place results in shared memory, written by the peers.
* output_pool.py: aligned host arrays for out-of-place results, reused once nothing sees them.

Built on it in ddl_runtime/collectives/: flat_allreduce.py (`FlatAllreduce`, one flat bucket reduced
step after step in the arena) and negotiated.py (`NegotiatedShm`, Horovod's name-negotiated
allreduces in windows of their own).

Nothing is re-exported here: import from the module that holds the name.
"""
