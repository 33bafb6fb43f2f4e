"""Where the static table lives, and how it is made once per machine.

The table is distilled from its teacher (the packaged MiniLM) into a cache folder outside any data
dir, named by the teacher's checksum, beside a manifest: the teacher's checksum and the table's own.
Every data dir, ``serve`` and every command read the same one. A table whose files no longer match
their checksums, or that another teacher made, is not used.

Two processes that both want it made take turns on a file lock: the second finds the first's table
when the lock comes free. The table is written to a staging folder beside its place and renamed into
it, so no one ever reads half a table. The ONNX export of the model (:mod:`.onnx_model`) is kept the
same way beside it, through the same helpers, with a lock and staging folders of its own.
``serve`` distils in a child process of its own (this module's ``__main__``) with a bounded number
of threads and a low priority: the server answers meanwhile, and a stop kills the child at once
instead of waiting for minutes of torch work, which no thread can be made to drop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from .checksum import files_checksum, sha256_file

log = logging.getLogger(__name__)

# The folder a table was kept in before tables were named by their teacher (and the image's, built
# so): read if its manifest names the teacher, never written.
LEGACY_FOLDER = "static-embedding"
MANIFEST = "manifest.json"
TABLE_FILES = ("model.safetensors", "tokenizer.json", "config.json")
LOCK_FILE = ".static-embedding.lock"
STAGING_PREFIX = ".static-staging-"
FORMAT = 1  # bumped when the way the table is distilled changes
# How often a process waiting for another's distillation looks at the lock again.
LOCK_POLL_S = 0.5
# A child asked to stop gets this long before it is killed.
CHILD_STOP_S = 1.0


class StaticModelUnavailable(Exception):
    """The static model could not be loaded or distilled (model2vec missing, teacher missing)."""


class StaticTableNotReady(StaticModelUnavailable):
    """The table is not made on this machine yet, and the caller would not wait for it."""


def teacher_checksum(teacher: Path) -> str:
    """One checksum over the teacher's weight and tokenizer files (and the distillation format)."""
    return files_checksum(teacher, f"format {FORMAT}\n")


def table_folder(root: Path, teacher_sum: str) -> Path:
    """The folder under ``root`` that a table of this teacher is distilled into."""
    return root / f"{LEGACY_FOLDER}-{teacher_sum[:16]}"


def cached_folder_is_valid(folder: Path, teacher_sum: str, names: Sequence[str] = TABLE_FILES) -> bool:
    """Whether ``folder`` holds the whole set of ``names`` made from this teacher (the model it was
    made from), every file as written: a file whose checksum no longer matches is not trusted."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(manifest, dict) or manifest.get("teacher") != teacher_sum:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != set(names):
        return False
    return all((folder / name).is_file() and sha256_file(folder / name) == sha for name, sha in files.items())


def find_table(roots: Sequence[Path], teacher_sum: str) -> Path | None:
    """The first valid table of this teacher under ``roots``: its own folder, or the legacy one."""
    for root in roots:
        for folder in (table_folder(root, teacher_sum), root / LEGACY_FOLDER):
            if cached_folder_is_valid(folder, teacher_sum):
                return folder
    return None


@contextlib.contextmanager
def _lock_file(root: Path, name: str = LOCK_FILE) -> Iterator[IO[bytes]]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / name).open("ab") as handle:
        yield handle


@contextlib.contextmanager
def distill_lock(root: Path, name: str = LOCK_FILE) -> Iterator[None]:
    """Hold ``root``'s lock called ``name`` (waiting for it): one process distils (or exports) at a
    time."""
    with _lock_file(root, name) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.asynccontextmanager
async def distill_lock_async(root: Path, on_wait: Callable[[str], None]) -> AsyncIterator[None]:
    """:func:`distill_lock` for the event loop: tried again every :data:`LOCK_POLL_S`, so a stop
    while waiting is a cancellation like any other. ``on_wait`` hears once that it waits."""
    with _lock_file(root) as handle:
        said = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not said:
                    on_wait("waiting for another process that is distilling the static embedding")
                    said = True
                await asyncio.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_staging(root: Path, prefix: str = STAGING_PREFIX) -> None:
    """Staging folders left by a distillation that was killed (only the lock's holder calls this)."""
    for leftover in root.glob(f"{prefix}*"):
        shutil.rmtree(leftover, ignore_errors=True)


def distill_into(folder: Path, teacher: Path, teacher_sum: str) -> None:
    """Distil the table from ``teacher`` and write it, with its manifest, to ``folder``.

    Written beside the folder first and renamed into place at the end, so a distillation that is
    stopped halfway leaves no half-written table behind. The caller holds :func:`distill_lock`.
    """
    try:
        from model2vec.distill import distill
    except ImportError as exc:
        raise StaticModelUnavailable(f"model2vec with its distill extra is not installed ({exc})") from exc

    def make(staging: Path) -> None:
        distill(str(teacher), pca_dims=None).save_pretrained(str(staging))

    write_staged(folder, teacher, teacher_sum, TABLE_FILES, make)


def write_staged(
    folder: Path,
    teacher: Path,
    teacher_sum: str,
    names: Sequence[str],
    make: Callable[[Path], None],
    staging_prefix: str = STAGING_PREFIX,
) -> None:
    """``make`` writes ``names`` into a staging folder beside ``folder``; their checksums go into a
    manifest beside them, and the whole folder is renamed into ``folder`` at the end, replacing
    what was there. The caller holds the lock of this kind of folder (:func:`distill_lock`)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_staging(folder.parent, staging_prefix)
    staging = Path(tempfile.mkdtemp(prefix=staging_prefix, dir=folder.parent))
    try:
        make(staging)
        files = {name: sha256_file(staging / name) for name in names}
        manifest = {"teacher": teacher_sum, "teacher_path": str(teacher), "files": files}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
        staging.chmod(0o755)  # mkdtemp's 0700 would hide a shared folder from other users
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def default_threads() -> int:
    """Half the cores this process may use, at least one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // 2)


async def distill_in_child(folder: Path, teacher: Path, teacher_sum: str, threads: int) -> None:
    """Run :func:`distill_into` in a child process with ``threads`` threads; the caller holds the
    lock. Cancelled, the child is stopped (killed after :data:`CHILD_STOP_S`) before this returns.
    Raises :class:`StaticModelUnavailable` with the child's last words when it fails."""
    args = ["--into", str(folder), "--teacher", str(teacher), "--sum", teacher_sum, "--threads", str(threads)]
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **child_environment(threads)},
    )
    try:
        _, err = await child.communicate()
    except asyncio.CancelledError:
        await _stop(child)
        _remove_staging(folder.parent)
        raise
    if child.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        raise StaticModelUnavailable(f"distilling the static embedding failed: {last[0]}")


async def _stop(child: asyncio.subprocess.Process) -> None:
    """Ask the child to stop, kill it if it has not within :data:`CHILD_STOP_S`, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        await asyncio.wait_for(child.wait(), CHILD_STOP_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
    log.info("stopped distilling the static embedding")


def child_environment(threads: int) -> dict[str, str]:
    """Thread counts for every math library the child may load (read when they start), no
    progress bars, and no network: the teacher is a local folder."""
    count = str(threads)
    return {
        "OMP_NUM_THREADS": count,
        "MKL_NUM_THREADS": count,
        "OPENBLAS_NUM_THREADS": count,
        "TQDM_DISABLE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def exit_when_orphaned(parent: int) -> None:
    """End this child as soon as its parent is gone (killed with -9: it cannot stop us itself)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _child_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Distil the static table (a child of serve)")
    parser.add_argument("--into", type=Path, required=True)
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--sum", required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args(argv)
    threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True).start()
    with contextlib.suppress(OSError):
        os.nice(10)  # the server's requests come first
    import torch

    torch.set_num_threads(args.threads)
    distill_into(args.into, args.teacher, args.sum)


if __name__ == "__main__":
    _child_main(sys.argv[1:])
