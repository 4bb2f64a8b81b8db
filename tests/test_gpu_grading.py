"""Grading on a GPU (--device cuda): the sandbox gets the GPU's device nodes, CUDA is started before the guard is
armed, and a run whose sandbox cannot use CUDA stops before grading anything instead of giving every learner 0.

CI has no GPU: these tests show the check refuses a sandbox without CUDA, passes the same steps on the CPU under the
armed guard, and that the sandbox's command carries the device nodes only on cuda. (Seen on an H200, before these
fixes: every call on cuda failed in the sandbox, first with "No CUDA GPUs are available" (a fresh /dev has no
NVIDIA nodes), then with "ctypes.dlopen is not allowed" (CUDA started lazily after the guard was armed).)"""

import pytest
import torch

from autograder.grading import sandbox
from conftest import ROOT, run_python

needs_sandbox = pytest.mark.skipif(sandbox.mode() == "none", reason="bubblewrap is not available here")


def test_the_sandbox_gets_the_gpu_device_nodes_and_driver_variables_only_on_cuda(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "gpu_device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    on_gpu, _ = sandbox.command(tmp_path, "bwrap", sandbox.Limits(gpu=True))
    on_cpu, _ = sandbox.command(tmp_path, "bwrap", sandbox.Limits())
    binds = [on_gpu[i + 1] for i, a in enumerate(on_gpu) if a == "--dev-bind"]
    assert binds == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"], on_gpu
    assert "--dev-bind" not in on_cpu
    settings = {on_gpu[i + 1]: on_gpu[i + 2] for i, a in enumerate(on_gpu) if a == "--setenv"}
    assert settings["CUDA_VISIBLE_DEVICES"] == "0" and settings["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert "CUDA_VISIBLE_DEVICES" not in [on_cpu[i + 1] for i, a in enumerate(on_cpu) if a == "--setenv"]


@needs_sandbox
def test_the_gpu_check_runs_the_jobs_steps_under_the_guard_and_refuses_a_sandbox_without_cuda():
    mode = sandbox.mode()
    # The same steps (the course's runner imported, the guard armed with softmax off, tensor work after it) pass
    # on the CPU: the check can pass.
    assert sandbox.gpu_check(mode, sandbox.Limits(gpu=True), device="cpu") is None
    if torch.cuda.is_available():
        assert sandbox.gpu_check(mode, sandbox.Limits(gpu=True)) is None
    else:
        why = sandbox.gpu_check(mode, sandbox.Limits(gpu=True))
        assert why is not None and "no CUDA device" in why, why


@needs_sandbox
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: a cuda run grades here")
def test_a_cuda_run_whose_sandbox_cannot_use_cuda_stops_before_grading(tmp_path):
    workdir = tmp_path / "work"
    done = run_python("-m", "autograder", "grade", str(ROOT / "autograder" / "demo"), "--workdir", str(workdir),
                      "--device", "cuda", "--seed", "1", timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "CUDA does not work in the grading sandbox" in done.stderr and "Nothing was graded" in done.stderr, done.stderr
    assert not (workdir / "summary.csv").exists() and not (workdir / "grades.csv").exists()



@needs_sandbox
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: its sandbox can use CUDA")
def test_a_worker_host_whose_sandbox_cannot_use_cuda_gives_its_cuda_jobs_back(tmp_path, monkeypatch):
    """On a Dask grading host the same pre-flight as a local cuda run, once per host: a cuda job there raises
    HostCannotGrade (Dask retries it elsewhere, the coordinator retires the host) instead of grading to 0."""
    from autograder.grading import cluster
    from autograder.results import Settings

    checks = []
    real = sandbox.gpu_check
    monkeypatch.setattr(sandbox, "gpu_check", lambda *a, **k: checks.append(a) or real(*a, **k))
    monkeypatch.setattr(cluster, "_cuda_checked", {})
    settings = Settings(str(tmp_path), 1, "cuda", sandbox.mode(), sandbox.Limits(gpu=True))
    job = cluster.Job("alice", "02-qkv-attention", b"{}", 2, b"", b"", settings, cluster.code_version())
    for _ in range(2):
        with pytest.raises(cluster.HostCannotGrade, match="CUDA does not work in its grading sandbox .*no CUDA device"):
            cluster.run_job(job)
    assert len(checks) == 1, "the host is checked once, not once per notebook"
