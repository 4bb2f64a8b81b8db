"""The prepared GPU check: grading on CUDA seen working, in one command, on a bare GPU machine.

    make gpu-bundle                      # here, with a package index: what grading needs, into .gpu-bundle/
    make gpu-check                       # there, with the machine's own python3 and torch (uses .gpu-bundle/)
    python scripts/gpu_check.py --dry-run --report R.md   # here, on the CPU: every step but CUDA (the test suite runs it)

The steps, each a section of the report (one Markdown file, `gpu-check-report.md` unless --report says where):
  1. install: the bundle's wheels into a folder of their own (pip, no index, no dependency resolution) and the
     sandbox's Debian packages unpacked without apt; then the check starts again with them on its paths.
  2. grade the grading corpus (every chapter's reference, blank, catalogued wrong and valid answers, and the
     grading-safety cheats) with --device cuda and with --device cpu, in the same run, with one seed;
  3. compare the two cell by cell (score and the message's first line) and list every difference;
  4. run every chapter's exercise notebook top to bottom in a kernel with the reference answers filled in (the
     notebooks build their tensors on the CPU: none lets the learner choose a device yet, so this shows the
     notebooks and their visible checks run on the GPU machine's Python and torch);
  5. time grading per notebook on the GPU and on the CPU.
The exit status is 1 when a difference, a failed notebook or a failed step remains, else 0. With --dry-run the
"cuda" run is a second CPU run: every step runs, CUDA alone is left out (no bundle is needed: the course's own
environment has everything).
"""

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / ".gpu-bundle"

# What grading needs beyond torch and numpy (the GPU machine's image has its own, at another version: kept). The
# bundle holds these with their dependencies, for the GPU machine's Python (3.12, manylinux x86-64), less what
# only Jupyter's user interfaces need (they make the bundle too large to carry, and grading never imports them).
BUNDLE_REQUIREMENTS = ["nbgrader==0.9.6", "dask[distributed]==2026.8.0", "ipykernel==6.29.5", "tqdm==4.70.1",
                       "jupytext==1.19.6", "nbclient", "nbformat", "pytest==9.2.0"]  # pytest: the cheat corpus lives in the tests
LEFT_OUT = {"torch", "numpy", "setuptools", "pip", "wheel", "jupyterlab", "notebook", "widgetsnbextension",
            "jupyterlab_widgets", "babel", "jupyter_builder", "debugpy", "jedi", "parso", "ipywidgets"}
# The sandbox (bubblewrap) and the libraries it links (present on most images; unpacked beside it regardless).
DEBIAN_PACKAGES = ["bubblewrap", "libcap2", "libselinux1", "libpcre2-8-0"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "any"]


# --- The bundle (made here, with a package index) ------------------------------------------------------------

def make_bundle(folder: Path, python_version: str) -> int:
    """Download the wheels and Debian packages the check installs on the GPU machine into `folder`."""
    wheels, debs = folder / "wheels", folder / "debs"
    shutil.rmtree(folder, ignore_errors=True)
    wheels.mkdir(parents=True)
    debs.mkdir()
    platform_args = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version",
                    python_version, "--implementation", "cp", *platform_args, "-d", str(wheels), *BUNDLE_REQUIREMENTS],
                   check=True)
    for wheel in sorted(wheels.iterdir()):
        if _distribution(wheel.name) in LEFT_OUT:
            wheel.unlink()
    if shutil.which("apt-get"):
        subprocess.run(["apt-get", "download", *DEBIAN_PACKAGES], cwd=debs, check=True, capture_output=True)
    else:
        print("no apt-get here: the bundle has no Debian packages (the GPU machine must have bubblewrap)")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    print(f"{folder}: {len(list(wheels.iterdir()))} wheels, {len(list(debs.iterdir()))} Debian packages, "
          f"{size / 2**20:.1f} MiB (carry it with the repository: the device tool's carry=['.gpu-bundle'])")
    return 0


def _distribution(filename: str) -> str:
    return filename.split("-")[0].lower().replace("-", "_").replace(".", "_")


# --- Step 1: install (there, with the machine's python3) -------------------------------------------------------

def install(bundle: Path, into: Path) -> dict:
    """Install the bundle into `into` and return the environment the rest of the check runs in."""
    env = dict(os.environ)
    site, tools = into / "site", into / "tools"
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    if wheels:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)], check=True)
    for deb in sorted((bundle / "debs").glob("*.deb")):
        unpack_deb(deb, tools)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    # site/bin: the console scripts (nbgrader runs `alembic`)
    env["PATH"] = os.pathsep.join([str(tools / "usr" / "bin"), str(site / "bin"), env.get("PATH", "")])
    libraries = [str(p) for p in (tools / "usr" / "lib" / "x86_64-linux-gnu", tools / "lib" / "x86_64-linux-gnu") if p.is_dir()]
    bwrap = tools / "usr" / "bin" / "bwrap"
    if bwrap.exists() and subprocess.run([str(bwrap), "--version"], capture_output=True).returncode != 0 and libraries:
        # The machine lacks a library bubblewrap links: a wrapper gives it the unpacked ones (the sandbox clears
        # the environment, so the learners' code does not inherit LD_LIBRARY_PATH).
        (into / "bin").mkdir(exist_ok=True)
        wrapper = into / "bin" / "bwrap"
        wrapper.write_text(f"#!/bin/sh\nLD_LIBRARY_PATH={':'.join(libraries)} exec {bwrap} \"$@\"\n")
        wrapper.chmod(0o755)
        env["PATH"] = os.pathsep.join([str(into / "bin"), env["PATH"]])
    return env


def unpack_deb(deb: Path, into: Path) -> None:
    """`dpkg -x` without dpkg: a .deb is an ar archive whose data.tar.* holds the files."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb.name} is not a Debian package")
    offset = 8
    while offset + 60 <= len(data):
        name, size = data[offset:offset + 16].decode().strip().rstrip("/"), int(data[offset + 48:offset + 58])
        body = data[offset + 60:offset + 60 + size]
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as archive:
                archive.extractall(into, filter="tar")
            return
        offset += 60 + size + (size % 2)
    raise ValueError(f"{deb.name} has no data.tar member")


# --- Steps 2-5 (with the grading environment in place) ---------------------------------------------------------

def write_corpus(folder: Path, chapters, cheats: bool, sample) -> int:
    """The grading corpus (scripts/grading_corpus.py's) and the grading-safety cheats, one student each."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import grading_corpus

    return grading_corpus.write_corpus(folder, chapters, cheats=cheats, sample=sample)


def grade(corpus: Path, workdir: Path, device: str, seed: str, env: dict) -> tuple[dict, float, str]:
    import grading_corpus

    command = [sys.executable, "-m", "autograder", "grade", str(corpus), "--workdir", str(workdir), "--device", device,
               "--seed", seed]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    seconds = time.perf_counter() - start
    tail = (done.stdout[-1500:] + done.stderr[-1500:]).strip()
    if not (workdir / "summary.csv").exists():
        raise RuntimeError(f"grading on {device} wrote no summary (exit status {done.returncode}):\n{tail}")
    return grading_corpus.outcome(workdir), seconds, f"exit status {done.returncode}\n{tail}"


def compare(cuda: dict, cpu: dict) -> list[str]:
    return [f"{key}: cuda {cuda.get(key)} | cpu {cpu.get(key)}" for key in sorted(set(cuda) | set(cpu)) if cuda.get(key) != cpu.get(key)]


def run_notebooks(chapters, env: dict) -> list[tuple[str, str, float]]:
    """Each chapter's exercise notebook with the reference answers, top to bottom in a kernel: (chapter, verdict, s)."""
    from nbclient import NotebookClient
    from autograder.authoring import demo

    results = []
    for chapter in chapters:
        notebook = demo.filled_submission(chapter)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as cwd:
            try:
                NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute(env=env)
                verdict = "ran"
            except Exception as error:  # CellExecutionError, DeadKernelError, ...: said in the report
                verdict = f"FAILED: {str(error).strip().splitlines()[-1][:300] if str(error).strip() else type(error).__name__}"
        results.append((chapter, verdict, time.perf_counter() - start))
    return results


def check(args) -> int:
    from autograder import registry

    import torch

    report, failed = [], False
    cuda_device = "cpu" if args.dry_run else "cuda"
    chapters = args.chapters or registry.graded_chapters()
    report.append(f"# GPU check ({'dry run on the CPU' if args.dry_run else 'CUDA'})\n")
    report.append(f"- host: python {sys.version.split()[0]}, torch {torch.__version__}, "
                  f"cuda available: {torch.cuda.is_available()}"
                  + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
    report.append(f"- install: {args.installed}")
    if not args.dry_run and not torch.cuda.is_available():
        report.append("\n**torch sees no GPU here: nothing was graded on CUDA.**")
        _write(args.report, report)
        return 1
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        corpus = Path(tmp) / "corpus"
        n = write_corpus(corpus, chapters, cheats=not args.without_cheats, sample=args.sample)
        report.append(f"- corpus: {n} notebooks, chapters {', '.join(chapters)}; seed {args.seed}\n")
        runs = {}
        for label, device in (("cuda", cuda_device), ("cpu", "cpu")):
            print(f"grading {n} notebooks on {device} ({label} run)...", flush=True)
            try:
                runs[label] = grade(corpus, Path(tmp) / f"work-{label}", device, args.seed, env)
            except RuntimeError as error:
                report.append(f"## Grading on {label}\n\n```\n{error}\n```")
                _write(args.report, report)
                return 1
        report.append("## Differences, CUDA against CPU (score, first message line)\n")
        differences = compare(runs["cuda"][0], runs["cpu"][0])
        report += [f"- {line}" for line in differences] or ["none"]
        failed |= bool(differences)
        report.append(f"\n{len(runs['cpu'][0])} rows compared, {len(differences)} differ.\n")
        report.append("## Seconds per notebook\n")
        for label in ("cuda", "cpu"):
            seconds = runs[label][1]
            report.append(f"- {label} ({cuda_device if label == 'cuda' else 'cpu'}): {seconds:.1f} s for {n} notebooks, "
                          f"{seconds / n:.2f} s per notebook (the whole command)")
        report.append("\n## Exercise notebooks top to bottom, reference answers\n")
        for chapter, verdict, seconds in run_notebooks(chapters, env):
            report.append(f"- {chapter}: {verdict} ({seconds:.1f} s)")
            failed |= verdict != "ran"
        report.append("\n## Grading commands' last lines\n")
        for label in ("cuda", "cpu"):
            report.append(f"### {label}\n\n```\n{runs[label][2]}\n```")
    report.append(f"\n**{'FAILED' if failed else 'passed'}**")
    _write(args.report, report)
    return 1 if failed else 0


def _write(path: Path, lines) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"\nreport: {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="on the CPU: every step but CUDA")
    parser.add_argument("--report", type=Path, default=ROOT / "gpu-check-report.md")
    parser.add_argument("--bundle", type=Path, default=BUNDLE, help="installed first where it exists (default .gpu-bundle/)")
    parser.add_argument("--chapters", nargs="*", help="only these chapters (default: all)")
    parser.add_argument("--seed", default="7")
    parser.add_argument("--sample", type=int, help="only the first N catalogued wrong and valid answers per chapter")
    parser.add_argument("--without-cheats", action="store_true", help="leave the grading-safety cheats out of the corpus")
    parser.add_argument("--make-bundle", type=Path, metavar="DIR", help="download the bundle into DIR and stop")
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python, for --make-bundle")
    parser.add_argument("--installed", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.make_bundle:
        return make_bundle(args.make_bundle, args.python_version)
    args.report = args.report.resolve()
    if not args.installed:
        if (args.bundle / "wheels").is_dir():
            start = time.perf_counter()
            into = Path(tempfile.mkdtemp(prefix="gpu-check-env-"))
            env = install(args.bundle, into)
            said = f"the bundle {args.bundle} installed into {into} in {time.perf_counter() - start:.0f} s"
        else:
            env, said = dict(os.environ), f"no bundle at {args.bundle}: the running environment as it is"
        again = [sys.executable, str(Path(__file__).resolve()), *(argv if argv is not None else sys.argv[1:]), "--installed", said]
        return subprocess.run(again, env=env).returncode
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
