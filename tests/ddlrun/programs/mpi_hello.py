"""An MPI program: print what MPI says about this rank next to what ddlrun set."""
import json
import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank())
print("MPI " + json.dumps({"mpi_rank": comm.Get_rank(), "mpi_size": comm.Get_size(), "RANK": os.environ["RANK"],
                           "sum": total, "library": MPI.Get_library_version().split("\n")[0],
                           "cpus": sorted(os.sched_getaffinity(0))}), flush=True)
