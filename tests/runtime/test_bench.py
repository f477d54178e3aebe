"""The benchmark runs under mpiexec and prints its tables (a smoke test; figures are in BENCHMARKS.md)."""
import json


def test_bench_tables(run_mpi, tmp_path):
    out = tmp_path / "bench.json"
    result = run_mpi(2, "bench_main.py", "-b", "4", "-e", "64K", "--budget", "0.005", "--repeats", "1",
                     "--iters", "1", "--fusion-mb", "1", "--digits-iters", "2", "--json", str(out), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout
    assert "| bytes | count | ddl time (us) | ddl algbw (GB/s) | ddl busbw (GB/s) |" in text
    report = json.loads(out.read_text())
    assert [row["bytes"] for row in report["sweep"]] == [4 * 4 ** i for i in range(8)]
    for row in report["sweep"]:
        for method in ("ddl", "mpi4py"):
            m = row[method]
            assert m["us"] > 0 and abs(m["busbw"] - m["algbw"]) < 1e-9  # 2 ranks: busbw = algbw * 2(n-1)/n
    resnet = report["resnet"]
    assert (resnet["tensors"], resnet["values"]) == (161, 25_557_032)
    assert set(resnet["median_s"]) == {
        "ddl allreduce_n", "ddl allreduce_n, 1 MB buckets", "mpi4py Allreduce per tensor",
        "ddl allreduce_n, gradients as views of one flat buffer",
        "ddl allreduce_n, gradients in shared memory (shared_zeros)",
        "ddl allreduce_n_fresh (out of place; results in shared memory on one host)",
        "mpi4py Allreduce, one pre-fused buffer", "torch.distributed gloo all_reduce per tensor",
        "ddl allreduce_n, mpi=True (MPI path, no shared memory)",
        "torch.distributed gloo all_reduce, 25 MB buckets (pack + unpack counted)"}
    assert "ResNet-50 gradients: 161 tensors, 25,557,032 float32" in text
    digits = report["digits"]
    assert (digits["tensors"], digits["bytes"]) == (9, 38_290 * 4)
    assert set(digits["median_s"]) == {"ddl allreduce_n (op avg)", "ddl allreduce_n, mpi=True",
                                       "ddl FlatAllreduce, copied in and out (DistributedOptimizer's path)",
                                       "mpi4py Allreduce of the same bytes (one buffer)"}
    assert "| ddl allreduce_n (op avg) |" in text


def test_resnet50_shapes():
    from ddl_runtime.resnet50 import resnet50_shapes
    shapes = dict(resnet50_shapes())
    assert len(shapes) == 161
    assert shapes["conv1.weight"] == (64, 3, 7, 7)
    assert shapes["layer4.2.conv2.weight"] == (512, 512, 3, 3)
    assert shapes["layer3.0.downsample.0.weight"] == (1024, 512, 1, 1)
    assert shapes["fc.weight"] == (1000, 2048)
