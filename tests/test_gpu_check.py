"""The prepared GPU check (scripts/gpu_check.py, `make gpu-check`): its dry run on the CPU runs every step but CUDA,
so that the check cannot rot between two GPU machines; its parts (the comparison, the .deb unpacking without dpkg)
are shown to fail on what they must catch."""

import importlib.util
import io
import subprocess
import tarfile

import pytest

from autograder.grading import sandbox
from conftest import ROOT, run_python

spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


def test_the_comparison_lists_every_difference_and_nothing_else():
    cpu = {"a/02/x": {"score": "3", "message": ""}, "a/02/y": {"score": "1", "message": "wrong scale"}}
    assert gpu_check.compare(cpu, dict(cpu)) == [], "identical runs differ in nothing"
    cuda = {"a/02/x": {"score": "2", "message": ""}, "b/02/x": {"score": "3", "message": ""}}
    differences = gpu_check.compare(cuda, cpu)
    assert len(differences) == 3, differences  # a changed score, a row only on cuda, a row only on cpu
    assert any(line.startswith("a/02/x:") and "'2'" in line and "'3'" in line for line in differences), differences


def _deb(files: dict) -> bytes:
    """A Debian package as dpkg builds one: an ar archive of debian-binary, control.tar.xz and data.tar.xz."""
    def tar(members):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:xz") as archive:
            for name, content in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(content), 0o755
                archive.addfile(info, io.BytesIO(content))
        return buffer.getvalue()

    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("control.tar.xz", tar({"./control": b"Package: x\n"})),
                       ("data.tar.xz", tar(files))):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode() + body + (b"\n" if len(body) % 2 else b"")
    return out


def test_a_debian_package_is_unpacked_without_dpkg(tmp_path):
    deb = tmp_path / "tool.deb"
    deb.write_bytes(_deb({"./usr/bin/tool": b"#!/bin/sh\necho unpacked\n"}))
    gpu_check.unpack_deb(deb, tmp_path / "root")
    tool = tmp_path / "root" / "usr" / "bin" / "tool"
    assert subprocess.run([str(tool)], capture_output=True, text=True).stdout == "unpacked\n"
    (tmp_path / "not.deb").write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ValueError, match="not a Debian package"):
        gpu_check.unpack_deb(tmp_path / "not.deb", tmp_path / "root")


@pytest.mark.skipif(sandbox.mode() == "none", reason="bubblewrap is not available here")
def test_the_dry_run_runs_every_step_but_cuda(tmp_path):
    """One chapter, a sample of its corpus: grade twice (the "cuda" run on the CPU), compare, run the notebook top to
    bottom, time; the report says each, and the exit status is 0 only when nothing differs or failed."""
    report = tmp_path / "report.md"
    done = run_python("scripts/gpu_check.py", "--dry-run", "--chapters", "08-encoder-decoder", "--sample", "1",
                      "--without-cheats", "--bundle", str(tmp_path / "no-bundle"), "--report", str(report), timeout=600)
    text = report.read_text() if report.exists() else ""
    assert done.returncode == 0, f"exit status {done.returncode}\n{text}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "corpus: 4 notebooks" in text, text  # reference, blank, one wrong answer, one valid answer
    assert "0 differ" in text and "\nnone\n" in text, text
    assert "- 08-encoder-decoder: ran" in text, text
    assert "s per notebook" in text and "**passed**" in text, text
