"""--container on each centre: the job script and ddlrun's launch line against the centre's page
(each test names it), both made from the same Layout; and the one-line errors of bad input.

Goldens: the per-rank launch line of `wml submit --dry-run` (the script's comment, the line that
ddlrun runs) and the script's container lines.  wml's own packages are bound from where this
checkout lies (``WML``)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from wmlce_tools.container.launch import wml_root

WML = wml_root()
BINDS_RO = f"{WML}/wmlce_tools:/opt/wml/wmlce_tools:ro {WML}/ddl_runtime:/opt/wml/ddl_runtime:ro"


def dry(run_wml, *args):
    out = run_wml("submit", "--dry-run", "-A", "m1", "-N", "2", *args, "python", "train.py")
    assert out.returncode == 0, out.stderr
    return out.stdout


SHIM = re.compile(r"python3? -m wmlce_tools\.ddlrun\.rankexec .*? -- ")


def launch_line(script: str) -> str:
    """The promised launch line with the rank shim taken out (every line carries it before the
    program, inside the container: these tests are about the wrapper around it)."""
    lines = script.splitlines()
    i = lines.index("# ddlrun recomputes this layout inside the allocation and runs:")
    line = lines[i + 1][len("#   "):]
    assert SHIM.search(line), line
    return SHIM.sub("", line, count=1)


def test_perlmutter_shifter(run_wml):
    # NERSC "Machine learning: launchers" (https://docs.nersc.gov/machinelearning/launchers):
    # #SBATCH --image=nersc/pytorch:25.02.01, #SBATCH --module=gpu,nccl-plugin, srun shifter ...
    script = dry(run_wml, "--site", "perlmutter", "--container", "nersc/pytorch:25.02.01")
    assert "#SBATCH --image=nersc/pytorch:25.02.01\n#SBATCH --module=gpu,nccl-plugin\n" in script
    v = " ".join(f"-V {b}" for b in BINDS_RO.split())
    assert launch_line(script) == (
        "srun -N 2 -n 8 --ntasks-per-node=4 --cpus-per-task=32 --threads-per-core=2 --gpus-per-node=4 "
        "--cpu-bind=cores --kill-on-bad-exit=1 shifter --image=nersc/pytorch:25.02.01 --module=gpu,nccl-plugin "
        f"{v} env PYTHONPATH=/opt/wml python train.py")
    assert "--container nersc/pytorch:25.02.01 --container-runtime shifter -- python train.py" in script


def test_perlmutter_podman_hpc(run_wml, tmp_path):
    # NERSC "Containers" (https://docs.nersc.gov/development/containers/) and its podman-hpc
    # modules: --mpi (Cray MPICH, the launcher's variables in), --gpu; podman passes no variable itself
    script = dry(run_wml, "--site", "perlmutter", "--container", "nersc/pytorch:25.02.01",
                 "--container-runtime", "podman-hpc", "--export", "FOO=1")
    line = launch_line(script)
    # ... and --nccl: the NCCL plugin module for Slingshot 11 (podman-hpc's etc/modules.d/nccl.yaml, issue 60)
    assert "--kill-on-bad-exit=1 podman-hpc run --rm --mpi --gpu --nccl " in line
    assert " -e FOO " in line and " -e OMP_NUM_THREADS " in line and " -e WML_STOP_SIGNAL " in line
    assert " -e WML_JOB_DIR " in line and " -e DDL_STATS_DIR " in line and " -e 'WML_PARAM_*' " in line   # issue 58
    v = " ".join(f"-v {b}" for b in BINDS_RO.split())
    assert line.endswith(f"{v} -v {tmp_path}:{tmp_path} -w {tmp_path} nersc/pytorch:25.02.01 "
                         "env PYTHONPATH=/opt/wml python train.py")
    assert "#SBATCH --image" not in script


def test_frontier_apptainer(run_wml):
    # OLCF "Containers on Frontier": module load olcf-container-tools, apptainer-enable-mpi,
    # apptainer-enable-gpu; srun ... apptainer exec --rocm IMAGE.sif CMD
    script = dry(run_wml, "--site", "frontier", "--container", "/lustre/orion/p/pt.sif")
    assert ("module load olcf-container-tools\nmodule load apptainer-enable-mpi\n"
            "module load apptainer-enable-gpu\n") in script
    b = " ".join(f"-B {x}" for x in BINDS_RO.split())
    assert launch_line(script) == (
        "srun -N 2 -n 16 --ntasks-per-node=8 --cpus-per-task=7 --threads-per-core=1 --gpus-per-task=1 "
        "--cpu-bind=cores --kill-on-bad-exit=1 --gpu-bind=closest apptainer exec --rocm "
        # the fabric's binds (issue 50: the Cray libraries, libdrm, slurmd's spool), then wml's
        f"-B /opt/cray -B /usr/share/libdrm -B /var/spool/slurmd {b} /lustre/orion/p/pt.sif env PYTHONPATH=/opt/wml "
        "python train.py")


def test_polaris_apptainer(run_wml):
    # ALCF "Containers on Polaris": cray-mpich-abi, APPTAINERENV_LD_LIBRARY_PATH with the Cray
    # libraries (expanded in the job), mpiexec ... apptainer exec --fakeroot -B /opt -B /var/run/palsd/
    script = dry(run_wml, "--site", "polaris", "--container", "/eagle/p/pt.sif")
    # the page's set-up (ml use /soft/modulefiles; ml spack-pe-base; ml apptainer), cray-mpich-abi once (issue 60)
    assert ("module use /soft/modulefiles\nmodule load spack-pe-base\nmodule load apptainer\n"
            "module load cray-mpich-abi\n") in script
    assert script.count("module load cray-mpich-abi") == 1 and "0.8.1" not in script and "e2fsprogs" not in script
    # the library path for inside goes in as APPTAINERENV_LD_LIBRARY_PATH, decided by ddlrun (issue 58)
    assert "export APPTAINERENV_LD_LIBRARY_PATH" not in script and "export LD_LIBRARY_PATH" not in script
    assert ("#     LD_LIBRARY_PATH=$CRAY_LD_LIBRARY_PATH:/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:"
            "/soft/libraries/hwloc/lib/:$LD_LIBRARY_PATH:/opt/cray/pe/pals/1.2.12/lib (inside the container)") in script
    b = " ".join(f"-B {x}" for x in BINDS_RO.split())
    assert launch_line(script) == (
        # every rank's variables on PALS's line, as ddlrun runs it (the old promise left the fabric's out)
        "mpiexec -n 8 --ppn 4 --depth=8 --cpu-bind depth --env OMP_NUM_THREADS=8 --env NCCL_NET_GDR_LEVEL=PHB "
        "--env NCCL_CROSS_NIC=1 --env NCCL_COLLNET_ENABLE=1 --env 'NCCL_NET=AWS Libfabric' "
        "--env FI_CXI_DISABLE_HOST_REGISTER=1 --env FI_MR_CACHE_MONITOR=userfaultfd --env FI_CXI_DEFAULT_CQ_SIZE=131072 "
        "--env 'LD_LIBRARY_PATH=/soft/libraries/aws-ofi-nccl/v1.9.1-aws/lib:/soft/libraries/hwloc/lib/:$LD_LIBRARY_PATH' "
        "apptainer exec --fakeroot --nv "
        # the fabric's bind (issue 50: aws-ofi-nccl under /soft/libraries), then wml's
        f"-B /opt -B /var/run/palsd/ -B /soft/libraries {b} /eagle/p/pt.sif env PYTHONPATH=/opt/wml python train.py")


def test_aurora_apptainer(run_wml):
    # ALCF "Containers on Aurora": module load apptainer; its DDP example's ranks run
    # `mpiexec ... apptainer exec ... IMAGE CMD` (no --fakeroot); one node: the fabric's TCP case
    # binds the host's libpmix in (issue 60: Aurora had no container section)
    script = dry(run_wml, "--site", "aurora", "-q", "debug-scaling", "--container", "/lus/flare/p/pt.sif")
    assert "module load apptainer\n" in script
    b = " ".join(f"-B {x}" for x in BINDS_RO.split())
    line = launch_line(script)
    assert line.startswith("mpiexec -n 24 --ppn 12 ") and "--fakeroot" not in line
    assert line.endswith(f"apptainer exec {b} /lus/flare/p/pt.sif env PYTHONPATH=/opt/wml python train.py")
    one = run_wml("submit", "--dry-run", "-A", "m1", "-N", "1", "-q", "debug", "--site", "aurora",
                  "--container", "/lus/flare/p/pt.sif", "python", "train.py")
    assert one.returncode == 0, one.stderr
    assert "apptainer exec -B /usr/lib64/libpmix.so.2:/hostlib/libpmix.so.2 " in launch_line(one.stdout)


def test_alps_container_engine(run_wml, isolated_env, tmp_path):
    # CSCS "Container Engine" / "EDF reference": srun --environment=EDF, the EDF's image in its own
    # form [USER@][REGISTRY#]IMAGE[:TAG]; "PyTorch": mounts /capstor and /iopsstor, ranks run python
    script = dry(run_wml, "--site", "alps", "--container", "nvcr.io#nvidia/pytorch:25.06-py3")
    assert launch_line(script).startswith("srun -N 2 -n 8 ")
    assert " '--environment=<EDF written by ddlrun>' env PYTHONPATH=/opt/wml python train.py" in launch_line(script)
    assert "--container 'nvcr.io#nvidia/pytorch:25.06-py3' --container-runtime container-engine" in script
    out = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--site", "alps", "-H", "nid1,nid2",
                          "--container", "nvcr.io#nvidia/pytorch:25.06-py3", "--dry-run", "--", "python", "train.py"],
                         cwd=tmp_path, env=isolated_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '#   image = "nvcr.io#nvidia/pytorch:25.06-py3"' in out.stdout
    assert '#   mounts = ["/capstor:/capstor", "/iopsstor:/iopsstor", ' in out.stdout


def test_local_podman_passes_no_host_path(run_wml, tmp_path):
    # podman's --env-host would put the host's PATH over the image's ENV (podman-run(1): the host's
    # environment comes after the image's): the launchers' and wml's variables go in by prefix
    script = dry(run_wml, "--container", "localhost/img", "--container-runtime", "podman")
    line = launch_line(script)
    assert "--env-host" not in line and " -e 'OMPI_*' -e 'PMIX_*' -e 'PMI_*' " in line and " -e 'WML_*' " in line


def test_slurm_pyxis(run_wml, tmp_path):
    # pyxis wiki "Usage": srun --container-image=[USER@][REGISTRY#]IMAGE[:TAG] --container-mounts=SRC:DST[:FLAGS],...
    script = dry(run_wml, "--site", "slurm-gpu", "--container", "nvcr.io#nvidia/pytorch:24.05-py3")
    assert launch_line(script) == (
        "srun -N 2 -n 8 --ntasks-per-node=4 --cpus-per-task=16 --threads-per-core=1 --gpus-per-task=1 "
        "--cpu-bind=cores --kill-on-bad-exit=1 '--container-image=nvcr.io#nvidia/pytorch:24.05-py3' "
        f"--container-mounts={BINDS_RO.replace(' ', ',')},{tmp_path}:{tmp_path} --container-workdir={tmp_path} "
        "env PYTHONPATH=/opt/wml python train.py")


ALPS = """\
name: alps-test
scheduler: slurm
launcher: srun
platform: linux-aarch64
node: {sockets: 4, cores_per_socket: 72, gpus_per_socket: 1}
total_nodes: 16
queues: {normal: {max_nodes: 16, max_walltime: "12:00"}}
container:
  runtime: container-engine
  runtimes:
    container-engine:
      annotations: {com.hooks.aws_ofi_nccl.enabled: "true", com.hooks.aws_ofi_nccl.variant: cuda12}
      docs: [https://docs.cscs.ch/software/container-engine/]
      checked: "2026-11-28"
"""


def test_cscs_container_engine_edf(tmp_path, isolated_env):
    # CSCS Container Engine: srun --environment=EDF; the EDF (TOML) holds image or
    # base_environment, workdir, mounts and [annotations] (the aws_ofi_nccl hook)
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "alps-test.yaml").write_text(ALPS)
    env = {**isolated_env, "WML_SITE_PATH": str(sites)}
    out = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--site", "alps-test", "-H", "nid1,nid2",
                          "--container", "pytorch", "--dry-run", "--", "python", "train.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    assert first.startswith("srun -N 2 -n 8 ") and "--kill-on-bad-exit=1 '--environment=<EDF written by ddlrun>' " in first
    assert " env PYTHONPATH=/opt/wml python -m wmlce_tools.ddlrun.rankexec " in first.replace("python3", "python")
    edf = "\n".join(l[4:] for l in rest[1:5])
    assert edf == (f'base_environment = "pytorch"\nworkdir = "{tmp_path}"\n'
                   f'mounts = ["{WML}/wmlce_tools:/opt/wml/wmlce_tools:ro", "{WML}/ddl_runtime:/opt/wml/ddl_runtime:ro", '
                   f'"{tmp_path}:{tmp_path}"]\n')
    assert '#   "com.hooks.aws_ofi_nccl.enabled" = "true"' in out.stdout


def test_ddlrun_and_script_agree(run_wml, isolated_env, tmp_path):
    """The job script's comment and ddlrun's launch (inside the allocation) wrap ranks alike."""
    script = dry(run_wml, "--site", "perlmutter", "--container", "nersc/pytorch:25.02.01")
    out = subprocess.run([sys.executable, "-m", "wmlce_tools.ddlrun.cli", "--site", "perlmutter", "-H", "nid1,nid2",
                          "--container", "nersc/pytorch:25.02.01", "--dry-run", "--", "python", "train.py"],
                         cwd=tmp_path, env=isolated_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ddlrun = out.stdout.splitlines()[0]
    head = launch_line(script).split(" env PYTHONPATH=/opt/wml ")[0]
    assert ddlrun.startswith(head + " env PYTHONPATH=/opt/wml python -m wmlce_tools.ddlrun.rankexec ")


@pytest.mark.parametrize("args, message", [
    (["--site", "theta", "--container", "x.sif"],
     "--container: site theta has no container runtime (its profile has no container: section)"),
    (["--site", "frontier", "--container", "x.sif", "--container-runtime", "shifter"],
     "--container-runtime 'shifter': site frontier offers apptainer"),
    (["--site", "perlmutter", "--container", "-v /etc:/x"], "not an image name for shifter on perlmutter"),
    (["--site", "frontier", "--container-runtime", "apptainer"], "--container-runtime apptainer goes with --container IMAGE"),
    (["--container", "/no/such/image"], "--container /no/such/image: no such image on this machine (charliecloud)"),
])
def test_bad_input_one_line(run_wml, tmp_path, args, message):
    out = run_wml("submit", "-A", "m1", *args, "python", "train.py")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert not (tmp_path / "wml-jobs").exists()        # nothing written


def test_profile_unknown_runtime(run_wml, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(ALPS.replace("runtime: container-engine", "runtime: docker"))
    out = run_wml("site", "validate", str(bad))
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0 and "container.runtime" in out.stderr, out.stderr


def test_site_default_image_and_none(run_wml, tmp_path):
    """A site's container.image runs every job in it; --container none runs one outside."""
    sites = tmp_path / "sites"
    sites.mkdir()
    text = (Path(wml_root()) / "site_configs" / "frontier.yaml").read_text()
    (sites / "frontier.yaml").write_text(text.replace("container:\n  runtime: apptainer\n",
                                                      "container:\n  runtime: apptainer\n  image: /lustre/orion/p/site.sif\n"))
    env = {"WML_SITE_PATH": str(sites)}
    default = run_wml("submit", "--dry-run", "--site", "frontier", "-A", "m1", "python", "train.py", env=env)
    assert default.returncode == 0, default.stderr
    assert " /lustre/orion/p/site.sif env PYTHONPATH=/opt/wml python train.py" in launch_line(default.stdout)
    off = run_wml("submit", "--dry-run", "--site", "frontier", "-A", "m1", "--container", "none", "python", "train.py", env=env)
    assert off.returncode == 0, off.stderr
    assert "apptainer" not in launch_line(off.stdout) and "module load apptainer" not in off.stdout
    assert "--container none -- python train.py" in off.stdout        # ddlrun: not the site's default either
