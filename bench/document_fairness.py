"""Fair turns across spaces: how long one space's small file waits while another space's long scan
is being read.

Run from the repository root: ``python -m bench.document_fairness [--pages 300]``. A real
``memory-mcp serve`` (its own data dir, one document worker: the default) gets a PDF of blank
pages (no text layer, so every page goes to OCR) in one space, then, once the worker holds it, a
30-byte text file in another space. Printed as soon as measured: the same file alone on an idle
server, then the small file's time from upload to done while the scan runs (the other-tenant wait)
and how far the scan had got; with ``--finish``, also the scan's total time (on two busy cores a
300-page scan takes half an hour).

Target: the other-tenant wait within 5 s while the scan runs (``document_slice_s`` is 2 s).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx2

from bench.common import machine, serve_process
from tests import samples

NOTE = b"Standup moves to 9:30 on Monday."  # 32 bytes


def _cli(data_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memory_mcp.cli", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _wait(
    http: httpx2.Client, doc_id: str, status: tuple[str, ...] = ("done", "failed")
) -> dict[str, object]:
    while True:
        doc: dict[str, object] = http.get(f"/v1/documents/{doc_id}").json()
        if doc["status"] in status:
            return doc
        time.sleep(0.05)


def _ready(http: httpx2.Client) -> bool:
    try:
        return http.get("/readyz").status_code == 200
    except httpx2.TransportError:  # not listening yet
        return False


def _upload(http: httpx2.Client, name: str, body: bytes, space: str) -> str:
    answer = http.post("/v1/documents", files={"file": (name, body)}, data={"containerTag": space})
    answer.raise_for_status()
    return str(answer.json()["id"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--finish", action="store_true", help="wait for the scan and print its time")
    args = parser.parse_args()
    print(machine())
    with serve_process("memory-mcp-fairness-") as (_, data_dir, port):
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while not (data_dir / "bootstrap-key").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        _cli(data_dir, "space", "create", "other")
        key = _cli(
            data_dir, "key", "create", "fairness", "--user", "admin", "--grant", "default=ReadWrite",
            "--grant", "other=ReadWrite",
        ).split()[-1]  # fmt: skip
        with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=300) as http:
            while not _ready(http):
                time.sleep(0.2)
            started = time.perf_counter()
            _wait(http, _upload(http, "alone.txt", NOTE + b" (alone)", "other"))
            alone = time.perf_counter() - started
            print(f"small file alone on an idle server: {alone:.1f} s", flush=True)

            scan_started = time.perf_counter()
            scan = _upload(http, "scan.pdf", samples.blank_pdf(args.pages), "default")
            _wait(http, scan, ("processing", "done", "failed"))
            time.sleep(3)  # well into the scan
            started = time.perf_counter()
            note = _wait(http, _upload(http, "note.txt", NOTE, "other"))
            waited = time.perf_counter() - started
            state = http.get(f"/v1/documents/{scan}").json()
            print(
                f"small file of another space while a {args.pages}-page blank scan runs: {waited:.1f} s "
                f"(status {note['status']}; the scan was {state['status']} at {state['progress']:.0%})",
                flush=True,
            )
            if args.finish:
                _wait(http, scan)
                print(f"the scan itself: {time.perf_counter() - scan_started:.0f} s")


if __name__ == "__main__":
    main()
