"""The public helpers on CUDA tensors, on CPU through the device stand-in (mpi_scripts/device_standin.py).

A helper that reads a device tensor as host memory (numpy) or pickles it as it lies fails here
as it fails on a GPU (parameters_max_divergence at 2 ranks: "can't convert cuda:0 device type
tensor to numpy"); benchmarks/gpu_checks.py's `helpers` check runs the same helpers on CUDA.
"""


def test_every_public_helper_takes_device_tensors_through_the_staged_route(run_mpi, tmp_path):
    ranks = run_mpi(2, "gpu_helpers_job.py", str(tmp_path / "ckpt"), env={"KERAS_BACKEND": "torch"},
                    timeout=240).summary(2)
    for rank in ranks:
        assert ["allreduce_n", "staged"] in rank["routes"]
