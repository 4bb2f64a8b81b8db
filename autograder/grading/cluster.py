"""Grading jobs on Dask distributed: one job per notebook, on an embedded cluster or on a running one.

`grade_all` hands each submission to a Dask client and yields every result as it finishes:
- by default the client runs an embedded `LocalCluster` on this machine: one single-threaded worker process
  per core (`--workers N`), started fresh (Dask spawns its worker processes: never forked from this process,
  which may have used torch's OpenMP, see grade.py), no setup, and the same scores as any other layout;
- `--scheduler tcp://HOST:8786` uses a running Dask cluster instead: `dask scheduler` on one host and
  `dask worker` on each grading host (guides/large-courses.md).

One code path: the embedded cluster is just a cluster whose scheduler and workers this process starts.

A job carries everything the worker needs (the notebook's bytes, the chapter's released and instructor
notebooks, the seed, device and limits), so a worker host shares no folder with the coordinator; it sends
back the result and the files it wrote (the autograded notebook and the feedback), and the coordinating
process writes them into the working directory and records the scores: it is the gradebook's one writer.

Failures:
- a worker that dies mid-notebook (killed, out of memory, its machine lost) does not lose the notebook: the
  scheduler runs the job again on another worker; a notebook whose workers die `allowed-failures` + 1 times
  (Dask's setting; 3 for the embedded cluster) gets the status "error" with a message that says so, and the
  batch goes on;
- a worker host that cannot grade (no sandbox, another version of the course) raises in the job; Dask retries
  it (`retries=`); on a running cluster the coordinator then retires that worker (so one broken host cannot
  swallow the batch) and hands the notebook to another, and after `HOST_FAILURES` such hosts the notebook gets
  an error naming the last one;
- `--device cuda` jobs ask for the resource `GPU: 1`: only workers started with `--resources GPU=1` take
  them (the embedded cluster's workers advertise it when this machine grades on CUDA).
"""

import contextlib
import functools
import hashlib
import logging
import os
import queue
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from autograder import registry
from autograder.results import Result, Settings, atomic_write, result_path

SCHEDULER_PORT = 8786  # Dask's own default
# Dask's allowed-failures of the embedded cluster: a notebook whose grading worker dies this often + 1 is given up.
ALLOWED_FAILURES = 2
RETRIES = 2  # Dask retries of a job that raised on its worker (a host that cannot grade)
HOST_FAILURES = 3  # on a running cluster, a notebook is handed out again after this many hosts could not grade it
CONNECT_TIMEOUT_S = 60  # waiting for a scheduler and its first worker
WORKER_WAIT_NOTE_S = 30  # a batch waiting this long for any worker says so


class ClusterError(RuntimeError):
    """The Dask cluster cannot be used: the message says why and what to do."""


class HostCannotGrade(RuntimeError):
    """Raised on a worker host that must not grade (no sandbox, another version of the course): Dask retries it,
    and on a running cluster the coordinator retires that worker and hands the notebook to another.
    args: (message, the worker's address)."""


@dataclass
class Job:
    """One notebook to grade, with everything a worker host needs (it shares no folder with the coordinator)."""

    student: str
    chapter: str
    notebook: bytes | None  # None for a symbolic link (graded as "invalid", as on the coordinator)
    size: int  # the file's size: a notebook over the size limit is refused without being sent
    release: bytes  # release/<chapter>/exercises.ipynb: the trusted notebook that runs
    source: bytes  # source/<chapter>/exercises.ipynb: the points of each graded cell
    settings: object  # autograder.grading.notebook.Settings (workdir: the coordinator's; replaced on the worker)
    code: str  # code_version() of the coordinator


@functools.lru_cache(maxsize=None)
def code_version() -> str:
    """A fingerprint of what decides a score: the grading code, the checks, the reference solutions and the
    versions of torch and numpy. A worker host with another one refuses to grade (its scores could differ). The
    build of torch does not count (2.13.0+cpu on a CPU host, a CUDA build of 2.13.0 on a GPU host)."""
    return _fingerprint(_grading_files() + sorted((registry.ROOT / "autograder" / "checks").glob("ch*.py")))


@functools.lru_cache(maxsize=None)
def checks_version(chapter: str) -> str:
    """The same fingerprint for one chapter: the grading code, the check library, this chapter's checks and every
    reference solution (a chapter's checks may use an earlier chapter's). A result graded under another one is
    graded again: a fix to a chapter's hidden checks reaches every learner of that chapter, and no other chapter."""
    return _fingerprint(_grading_files() + [registry.ROOT / "autograder" / "checks" / f"{registry.module_name(chapter)}.py"])


def _grading_files() -> list:
    root = registry.ROOT
    files = [root / "autograder" / name for name in ("registry.py", "results.py", "grading/notebook.py", "grading/submission.py", "grading/sandbox.py", "grading/warm.py",
                                                     "grading/template.py", "grading/shortcuts.py",
                                                     "reporting/feedback.py")]
    files += sorted(p for p in (root / "autograder" / "checks").glob("*.py") if not p.name.startswith("ch"))
    return files + sorted((root / "solutions").glob("*.py"))


def _version(package: str) -> str:
    """An installed package's version, from its metadata: the coordinator of a run on the cluster then never imports
    torch (about 2 s of its start). A package without metadata is imported to ask it."""
    from importlib import import_module
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return import_module(package).__version__


def _fingerprint(files) -> str:
    digest = hashlib.sha256(f"torch {_version('torch').split('+')[0]} numpy {_version('numpy')}\n".encode())
    root = registry.ROOT
    for path in sorted(set(files)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _host_sandbox() -> str:
    from autograder.grading import sandbox

    return sandbox.mode()


_cuda_checked: dict = {}


def _host_cuda(sandbox_mode: str, device: str, limits) -> str | None:
    """Why CUDA does not work in this host's sandbox (None when it does): the pre-flight a local cuda run makes
    before grading, made once per worker host (and per sandbox, device and limits), so that a GPU host whose
    driver or device nodes are broken gives its jobs back instead of giving every learner 0."""
    from autograder.grading import sandbox

    key = (sandbox_mode, device, repr(limits))
    if key not in _cuda_checked:
        _cuda_checked[key] = sandbox.gpu_check(sandbox_mode, limits, device)
    return _cuda_checked[key]


def make_job(workdir: Path, sub, settings, chapter_files: dict) -> Job:
    """The job for one submission (intake.Submission); `chapter_files` caches each chapter's notebooks."""
    from autograder.grading.submission import MAX_FILE_BYTES

    if sub.chapter not in chapter_files:
        chapter_files[sub.chapter] = tuple((Path(workdir) / kind / sub.chapter / f"{registry.NOTEBOOK}.ipynb").read_bytes()
                                           for kind in ("release", "source"))
    release, source = chapter_files[sub.chapter]
    path = Path(sub.path)
    notebook, size = None, 0
    if not path.is_symlink():
        try:
            size = path.stat().st_size
            notebook = path.read_bytes() if size <= MAX_FILE_BYTES else b""  # outputs are removed where it is read
        except OSError:
            notebook = b""  # gone since intake: graded as "invalid" (not JSON)
    return Job(sub.student, sub.chapter, notebook, size, release, source, settings, code_version())


def run_job(job: Job):
    """On a worker: grade one notebook in a scratch folder of this host; return (Result, {relative path: text}).

    A problem of this host (no sandbox, another version of the course, no room in /tmp) raises
    HostCannotGrade, so that Dask retries the job; a problem of the notebook is in the result."""
    judge_in_one_thread()
    from autograder.grading.notebook import grade_submission

    host = socket.gethostname()
    # A Dask worker has imported distributed; a notebook graded by the grading process itself (an --only rerun of one
    # notebook) is not on a worker, and importing distributed only to learn that costs about 0.7 s.
    distributed = sys.modules.get("distributed")
    try:
        address = distributed.get_worker().address if distributed is not None else ""
    except ValueError:  # not on a Dask worker (called directly)
        address = ""
    if job.code != code_version():
        raise HostCannotGrade(f"worker host {host} runs another version of the course (code {code_version()}, the coordinator's "
                              f"{job.code}): update its checkout and environment, then restart its dask worker", address)
    settings = job.settings
    mode = _host_sandbox()
    if mode == "none" and settings.sandbox_mode != "none":
        raise HostCannotGrade(f"worker host {host} has no sandbox (bubblewrap missing or unable to create namespaces): "
                              "install bubblewrap there (apt install bubblewrap), then restart its dask worker", address)
    if settings.device.startswith("cuda"):
        why = _host_cuda(settings.sandbox_mode, settings.device, settings.limits)
        if why:
            raise HostCannotGrade(f"worker host {host}: CUDA does not work in its grading sandbox ({why}): fix its GPU "
                                  "setup (guides/instructors.md, \"Grading on a GPU\"), then restart its dask worker", address)
    try:
        scratch = tempfile.TemporaryDirectory(prefix="course-grade-")
    except OSError as exc:
        raise HostCannotGrade(f"worker host {host}: no scratch folder ({exc})", address) from None
    with scratch as tmp:
        workdir = Path(tmp)
        try:
            for kind, data in (("release", job.release), ("source", job.source)):
                target = workdir / kind / job.chapter / f"{registry.NOTEBOOK}.ipynb"
                target.parent.mkdir(parents=True)
                target.write_bytes(data)
            notebook = workdir / "submission" / f"{registry.NOTEBOOK}.ipynb"
            notebook.parent.mkdir()
            if job.notebook is None:
                notebook.symlink_to(os.devnull)  # read_submission refuses it, as it would the original link
            elif job.size and not job.notebook:
                with notebook.open("wb") as f:  # over the size limit: a sparse file of that size, refused unread
                    f.truncate(job.size)
            else:
                notebook.write_bytes(job.notebook)
        except OSError as exc:
            raise HostCannotGrade(f"worker host {host}: cannot write its scratch folder ({exc})", address) from None
        local = Settings(str(workdir), settings.seed, settings.device, mode, settings.limits)
        try:
            result = grade_submission(job.student, job.chapter, notebook, local)
        except Exception as exc:  # a bug of ours: say so, keep the batch going
            result = Result(job.student, job.chapter, "error", error=f"grader error on {host}: {type(exc).__name__}: {exc}",
                            seed=settings.seed, device=settings.device)
        files = {}
        for kind in ("autograded", "feedback"):
            for path in (workdir / kind).rglob("*"):
                if path.is_file():
                    files[path.relative_to(workdir).as_posix()] = path.read_text(encoding="utf-8")
    return result, files


def judge_in_one_thread():
    """The judge's torch computes on one thread wherever it runs. A Dask worker's nanny starts it so
    (OMP_NUM_THREADS=1); the grading process's own notebook (an --only rerun) and a worker started without a nanny
    would otherwise use one thread per core for tensors of a few dozen numbers: each call then waits for the other
    threads to wake, which on a loaded machine is a scheduler tick (chapter 08's judge took 1.2 s instead of 0.15 s
    beside a test run), and a rerun computes the reference as the worker that graded it first did."""
    torch = sys.modules.get("torch")
    if torch is None:
        os.environ["OMP_NUM_THREADS"] = "1"  # read by torch when it is imported, for the judge's first call
    elif torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def write_outputs(workdir: Path, job: Job, files: dict):
    """The autograded notebook and the feedback a worker sent back, written atomically into the working
    directory (only under autograded/ and feedback/, and only for the job's own student and chapter)."""
    for rel, text in files.items():
        parts = Path(rel).parts
        if len(parts) != 4 or parts[0] not in ("autograded", "feedback") or parts[1:3] != (job.student, job.chapter) or ".." in parts:
            continue
        path = Path(workdir, *parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, text)


class _OnceForHostErrors(logging.Filter):
    """Dask logs every failed job with its traceback: a host that cannot grade says why once, not per notebook."""

    seen = False

    def filter(self, record):
        if "HostCannotGrade" not in record.getMessage():
            return True
        seen, self.seen = self.seen, True
        return not seen


def _worker_setup():
    """In every worker process: Ctrl-C in the instructor's terminal reaches the whole process group, but only
    the coordinator decides (it lets the notebooks in progress finish); warnings stay out of the output."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.filterwarnings("ignore")
    log = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _OnceForHostErrors) for f in log.filters):
        log.addFilter(_OnceForHostErrors())


def _plugin():
    from distributed import WorkerPlugin

    class GraderSetup(WorkerPlugin):
        name = "course-grader-setup"
        idempotent = True

        def setup(self, worker):
            _worker_setup()

        def teardown(self, worker):
            from autograder.grading import warm

            warm.close_all()  # the worker's warm templates and their folders

    return GraderSetup()


@contextlib.contextmanager
def connect(scheduler: str | None = None, workers: int | None = None, device: str = "cpu", out=sys.stdout):
    """A Dask client: on `scheduler` (tcp://HOST:PORT), or on an embedded cluster of `workers` single-threaded
    worker processes (default: one per core). Closes what it started."""
    import dask
    from distributed import Client, LocalCluster

    gpu = device.startswith("cuda")
    cluster = client = None
    try:
        if scheduler is None:
            n = workers or os.cpu_count() or 1
            with dask.config.set({
                "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                "distributed.scheduler.worker-saturation": 1.0,  # a job goes to an idle worker, never queues behind another
                "distributed.worker.profile.enabled": False,  # no stack sampling beside the grading
                "distributed.worker.multiprocessing-method": "spawn",  # fresh processes, never forked (see grade.py)
                "distributed.admin.system-monitor.gil.enabled": False,
            }):
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1", scheduler_port=0,
                                       dashboard_address=None, memory_limit=0, resources={"GPU": 1} if gpu else None)
                client = Client(cluster, set_as_default=False)
        else:
            try:
                _knock(scheduler)  # a refused connection is said at once (the client would retry it for a minute)
                client = Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise ClusterError(f"cannot reach the Dask scheduler at {scheduler} ({type(exc).__name__}: {exc}); "
                                   "start it with `dask scheduler` on that host (guides/large-courses.md)") from None
            try:
                client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise ClusterError(f"no Dask worker joined the scheduler {scheduler} within {CONNECT_TIMEOUT_S} s: "
                                   "start `dask worker` on the grading hosts") from None
        client.register_plugin(_plugin())
        grading = Grading(client, gpu, scheduler)
        if gpu and not grading.capacity():
            raise ClusterError(f"--device {device}: no worker of {scheduler} advertises a GPU; start the GPU hosts' workers "
                               "with `dask worker ... --resources GPU=1`, or grade with --device cpu")
        yield grading
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=10)
        if cluster is not None:
            # A worker busy importing torch at the end (a loaded machine) is killed after 4 s with a WARNING per
            # worker: harmless (every result is in by then), and noise at the end of an instructor's run.
            logging.getLogger("distributed.nanny").setLevel(logging.ERROR)
            with contextlib.suppress(Exception):
                cluster.close(timeout=10)


def _knock(address: str):
    """Open and close a TCP connection to a tcp:// (or tls://) scheduler address; OSError when nothing listens."""
    from distributed.comm import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme in ("tcp", "tls"):
        host, port = parse_host_port(location, default_port=SCHEDULER_PORT)
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()


def prepare_worker() -> bool:
    """On a worker, as soon as it runs: import the grading code (torch with it) and what the judge's first call
    imports (notebook.prepare_judge), while the coordinator is still importing and releasing."""
    from autograder.grading import notebook

    notebook.prepare_judge()
    return True


def warm_up(limits) -> str:
    """On a worker: start its warm template before its first notebook (the host's own sandbox, as run_job uses)."""
    from autograder.grading import warm

    return warm.prestart(_host_sandbox(), limits)


def early_start(submissions: Path, workdir: Path, only=None, chapters=None, restart=False) -> str | None:
    """What is worth starting before the grader has imported anything heavy (the CLI's call, before grade.py): a quick
    look, before intake's, at the notebooks <student>/<chapter>/exercises.ipynb of the selection, when one of them
    has no result in the working directory (or --only/--chapter/--restart, which regrade). Two or more: "cluster",
    the embedded cluster; exactly one: "template", the warm template of the grading process, which grades a single
    notebook itself (an --only rerun); else None. A wrong guess costs time only: grade() closes what it does not use,
    or starts what it needs itself."""
    import unicodedata

    only = {unicodedata.normalize("NFC", name) for name in only or ()}
    try:
        notebooks = [p for p in Path(submissions).glob(f"*/*/{registry.NOTEBOOK}.ipynb")
                     if (not only or unicodedata.normalize("NFC", p.parent.parent.name) in only) and (not chapters or p.parent.name in chapters)]
    except OSError:
        return None
    if not notebooks:
        return None
    if not (only or chapters or restart) and all(result_path(workdir, p.parent.parent.name, p.parent.name).exists() for p in notebooks):
        return None
    return "cluster" if len(notebooks) >= 2 else "template"


class EarlyStart:
    """The embedded cluster started in a thread while the grader prepares the run (its imports, nbgrader's release
    of the chapters: seconds): each worker imports the grading code at once (prepare_worker) and, once `use(settings)`
    gives the run's settings, starts its warm template. `grading()` waits for it; `close()` stops it (once).
    On two cores the preparation and the workers' start (Python, torch, the template) overlap."""

    def __init__(self, workers, device, out=sys.stdout):
        self.workers, self.device = workers, device
        self._context = connect(None, workers, device, out)
        self._grading, self._error, self._settings, self._closed = None, None, None, False
        self._given = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._start, name="course-early-start", daemon=True)
        self._thread.start()

    def matches(self, workers, device) -> bool:
        return (self.workers, self.device) == (workers, device) and not self._closed

    def use(self, settings):
        """The run's settings: each worker starts its warm template with them."""
        self._settings = settings
        self._given.set()

    def _submit_each(self, function, *args):
        futures = [self._grading.client.submit(function, *args, workers=[address], pure=False, key=f"{function.__name__}-{uuid.uuid4().hex[:8]}")
                   for address in self._grading.workers()]
        self._grading.client.gather(futures, errors="skip")  # a worker that fails here: its jobs say why

    def _start(self):
        try:
            self._grading = self._context.__enter__()
            self._submit_each(prepare_worker)
            self._given.wait()
            settings = self._settings
            if settings is not None and settings.sandbox_mode != "none" and not settings.device.startswith("cuda"):
                self._submit_each(warm_up, settings.limits)  # a template that cannot start: its jobs run cold
        except BaseException as exc:  # said when the grader asks for the cluster
            self._error = exc

    def grading(self) -> "Grading":
        self._given.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._grading

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._given.set()
            self._thread.join()
            if self._grading is not None:
                self._context.__exit__(None, None, None)
                self._grading = None


class Grading:
    """A connected client: how many jobs may run at once, and submitting one."""

    def __init__(self, client, gpu: bool, scheduler: str | None):
        self.client, self.gpu, self.scheduler = client, gpu, scheduler

    def workers(self) -> dict:
        return self.client.scheduler_info(n_workers=-1).get("workers", {})

    def capacity(self) -> int:
        """Jobs that can run at once: the threads of the workers that may take them (GPU workers for cuda)."""
        return sum(w.get("nthreads", 1) for w in self.workers().values() if not self.gpu or w.get("resources", {}).get("GPU", 0) >= 1)

    def describe(self) -> str:
        workers = self.workers()
        hosts = {w.get("host") for w in workers.values()}
        where = "embedded Dask cluster" if self.scheduler is None else f"Dask scheduler {self.scheduler}"
        return f"{where}: {len(workers)} worker(s) on {len(hosts)} host(s), {self.capacity()} job(s) at once"

    def submit(self, job: Job):
        tag = hashlib.sha1(f"{job.student}\0{job.chapter}".encode()).hexdigest()[:12]
        return self.client.submit(run_job, job, key=f"grade-{job.chapter}-{tag}-{uuid.uuid4().hex[:8]}", pure=False,
                                  retries=RETRIES, resources={"GPU": 1} if self.gpu else None)


LOST = ("grader error: the connection to the Dask scheduler was lost, so this notebook was not graded: start the "
        "scheduler and the workers again and run the same command (it resumes)")


def _failure(job: Job, exc: BaseException | None, lost=False):
    """The result of a job Dask gave up on: a worker that kept dying, a host that could not grade, the scheduler lost."""
    from distributed.scheduler import KilledWorker


    if lost or exc is None:
        text = LOST
    elif isinstance(exc, KilledWorker):
        last = getattr(exc.last_worker, "address", exc.last_worker)
        text = (f"grader error: its grading worker died {exc.allowed_failures + 1} times while grading this notebook (killed, out "
                f"of memory or its machine lost; last on {last}): not graded; the same command tries it again")
    elif isinstance(exc, HostCannotGrade):
        text = f"grader error: {exc}"
    else:
        text = f"grader error: the grading job failed ({type(exc).__name__}: {str(exc)[:300]})"
    return Result(job.student, job.chapter, "error", error=text, seed=job.settings.seed, device=job.settings.device)


def _grade_here(sub, settings, workdir: Path, before_submit, started, out):
    """One notebook on one machine, graded by this process with the run_job a worker runs (the same sandbox, warm
    template and judge): a cluster's start (a scheduler, worker processes importing torch: seconds) brings nothing to
    a single job, such as the rerun of one student with --only."""
    from autograder.grading import warm

    print("Grading in this process (one notebook: no cluster is started).", file=out, flush=True)
    if before_submit is not None:
        before_submit(sub)
    job = make_job(workdir, sub, settings, {})
    if started is not None:
        started()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # as on a worker (_worker_setup): the learner's warnings stay out of the output
            result, files = run_job(job)
    except HostCannotGrade as exc:
        yield sub, _failure(job, exc)
        return
    finally:
        warm.close_all()  # the template this process started for its one notebook (a worker's lives until its teardown)
    write_outputs(workdir, job, files)
    yield sub, result


def grade_all(subs, settings, workdir: Path, *, scheduler=None, workers=None, stop=lambda: False, before_submit=None,
              started=None, out=sys.stdout, early: EarlyStart | None = None):
    """Grade the submissions (intake.Submission) on Dask; yield (submission, Result) as each one finishes,
    after its autograded notebook and feedback are in the working directory.

    At most as many jobs are handed out as the workers can run at once, so every job handed out is being
    graded: when `stop()` turns true (Ctrl-C), nothing more is handed out and the jobs in progress finish.
    `before_submit(sub)` runs just before a job is handed out, `started()` once, after the first ones. With `early`
    (the embedded cluster started beforehand), its cluster is used and left for the caller to close."""
    workdir = Path(workdir)
    subs = list(subs)
    if scheduler is None and early is None and len(subs) == 1:
        yield from _grade_here(subs[0], settings, workdir, before_submit, started, out)
        return
    chapter_files = {}
    host_failures, retired = {}, set()
    with contextlib.nullcontext(early.grading()) if early else connect(scheduler, workers, settings.device, out) as grading:
        print(f"Grading on the {grading.describe()}.", file=out, flush=True)
        todo = list(subs)
        pending = {}  # future key -> (future, submission, job)
        finished = queue.Queue()
        waiting_since = None

        def hand_out():
            """Hand out jobs up to what the workers can run at once; none once stop() is true."""
            capacity = grading.capacity() if todo and not stop() else 0
            while todo and len(pending) < capacity and not stop():
                sub = todo.pop(0)
                if before_submit is not None:
                    before_submit(sub)
                job = make_job(workdir, sub, settings, chapter_files)
                future = grading.submit(job)
                pending[future.key] = (future, sub, job)
                future.add_done_callback(finished.put)

        while todo or pending:
            if grading.client.status not in ("running", "connecting"):  # the scheduler is gone for good
                for future, sub, job in pending.values():
                    yield sub, _failure(job, None, lost=True)
                for sub in todo:
                    yield sub, _failure(make_job(workdir, sub, settings, chapter_files), None, lost=True)
                return
            hand_out()
            if started is not None and pending:
                started()
                started = None
            if not pending:
                if stop() or not todo:
                    break
                waiting_since = waiting_since or time.monotonic()
                if time.monotonic() - waiting_since > WORKER_WAIT_NOTE_S:
                    print(f"Waiting for a Dask worker to join {scheduler or 'the embedded cluster'} (Ctrl-C to stop; finished notebooks "
                          "are kept)...", file=out, flush=True)
                    waiting_since = time.monotonic()
                time.sleep(0.5)
                continue
            waiting_since = None
            try:
                future = finished.get(timeout=0.5)
            except queue.Empty:
                continue
            if future.key not in pending:
                continue
            _, sub, job = pending.pop(future.key)
            if future.status == "finished":
                result, files = future.result()
                write_outputs(workdir, job, files)
            else:
                try:
                    exc = future.exception()
                except BaseException:  # cancelled: the scheduler was lost
                    exc = None
                future.release()
                if isinstance(exc, HostCannotGrade) and scheduler is not None:
                    # A grading host that is not fit: take it out of the cluster, and give the notebook to another.
                    address = exc.args[1] if len(exc.args) > 1 else ""
                    if address and address not in retired:
                        retired.add(address)
                        print(f"\nnote: retiring the Dask worker {address}: {exc.args[0]}", file=out, flush=True)
                        with contextlib.suppress(Exception):
                            grading.client.retire_workers([address], close_workers=True)
                    host_failures[(sub.student, sub.chapter)] = host_failures.get((sub.student, sub.chapter), 0) + 1
                    if host_failures[(sub.student, sub.chapter)] < HOST_FAILURES:
                        todo.insert(0, sub)
                        continue
                result = _failure(job, exc)
            future.release()
            # The freed worker gets its next notebook before the caller records this one (the gradebook's transaction,
            # the saved result: tens of milliseconds in which the worker would otherwise wait).
            hand_out()
            yield sub, result
