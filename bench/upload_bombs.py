"""Decompression bombs against the extractors: the peak memory each upload costs the worker.

Run from the repository root: ``python -m bench.upload_bombs``. Each file is extracted the way the
document worker does it (``extractors.extract``), in a fresh process, and its peak RSS is printed
beside that of an ordinary file of the same kind and the outcome (the refusal, for a bomb).

- a PNG of 12,500 x 12,500 blank pixels (about 160 KB; Pillow's own bomb limit is 178 million);
- a .docx whose main part is named ``word/document.dat`` and inflates to 1 GiB (about 1 MB);
- an ordinary PNG and .docx for the baseline.

And imports (``memory-mcp import``, ``POST /v1/spaces/{key}/import``), each parsed as an import
parses it (``importers.parse``) in a fresh process, with its time, its CPU time, the RSS it added
and the peak the importer's own accounting held against its memory budget (``importers.budget``):

- a ChatGPT export zip of about 550 KB whose conversations.json holds one message of 100 MB of text
  (inside the archive's 200:1 ratio);
- a Markdown vault zip whose one note is 100 MB of text;
- a valid ChatGPT export zip of about 50 MB of generated conversations (``bench.import_formats``);
- a mem0 ``memories.json`` whose top level is one list of about 50 MB (40,000 memories with their
  metadata).

``--before REF`` parses each import a second time with the importers of the git revision REF (the
rest of the code as it is now), so that a change to them shows its before and after in one run:

    python -m bench.upload_bombs                               # every case
    python -m bench.upload_bombs --imports-only --before HEAD~3

The builders are shared with the tests (``tests/server/test_hardening_v4.py``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import string
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bomb(side: int = 12_500) -> bytes:
    """A grayscale PNG of `side` x `side` blank pixels, compressed row by row (little memory)."""
    compressor = zlib.compressobj(9)
    row = b"\x00" + b"\xff" * side  # filter byte, then white pixels
    parts = [compressor.compress(row) for _ in range(side)]
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", b"".join(parts))
        + _chunk(b"IEND", b"")
    )


def docx_bomb(inflated: int = 1 << 30) -> bytes:
    """A valid .docx whose main part is renamed ``word/document.dat`` (its relationships and content
    types follow) and padded with whitespace after the root element up to `inflated` bytes."""
    source = zipfile.ZipFile(io.BytesIO(ordinary_docx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "word/document.xml":
                info = zipfile.ZipInfo("word/document.dat")
                info.compress_type = zipfile.ZIP_DEFLATED
                with archive.open(info, "w", force_zip64=True) as part:
                    part.write(data)
                    block = b" " * (1 << 20)
                    for _ in range(max(0, inflated - len(data)) >> 20):
                        part.write(block)
                continue
            name = item.filename.replace("document.xml.rels", "document.dat.rels")
            archive.writestr(name, data.replace(b"document.xml", b"document.dat"))
    return out.getvalue()


def ordinary_docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph("The release train leaves on Thursday at ten.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def ordinary_png() -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("L", (600, 200), 255)
    ImageDraw.Draw(image).text((20, 80), "Release train leaves Thursday", fill=0)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _prose(size: int) -> bytes:
    """``size`` bytes of words that deflate about 180:1: a sentence repeated, with a few random
    letters every few KB so that the ratio stays under the archive limit of 200:1."""
    rng = random.Random(7)
    words = ["the", "crate", "dock", "east", "holds", "parts", "spare", "boiler", "every", "week"]
    sentence = " ".join(rng.choice(words) for _ in range(200)) + ". "
    out = bytearray()
    while len(out) < size:
        out += (sentence * 8 + "".join(rng.choice(string.ascii_lowercase) for _ in range(3)) + " ").encode()
    return bytes(out[:size])


def _deflated(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def chatgpt_import_bomb(text_bytes: int = 100_000_000) -> bytes:
    """A ChatGPT export zip: one conversation, one user message of ``text_bytes`` of prose."""
    head = (
        b'[{"title": "Notes", "id": "c1", "current_node": "m1", "mapping": {"m1": {"id": "m1", '
        b'"parent": null, "children": [], "message": {"author": {"role": "user"}, "create_time": 1700000000, '
        b'"content": {"content_type": "text", "parts": ["'
    )
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive,
        archive.open(_deflated("conversations.json"), "w", force_zip64=True) as member,
    ):
        member.write(head)
        member.write(_prose(text_bytes))
        member.write(b'"]}}}}}]')
    return out.getvalue()


def markdown_import_bomb(text_bytes: int = 100_000_000) -> bytes:
    """A vault zip with one note of ``text_bytes`` of prose."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive,
        archive.open(_deflated("vault/Notes.md"), "w", force_zip64=True) as member,
    ):
        member.write(b"# Notes\n\n")
        member.write(_prose(text_bytes))
    return out.getvalue()


def chatgpt_export(text_bytes: int = 50_000_000) -> bytes:
    """A valid ChatGPT export zip: generated conversations of three user turns each, about
    ``text_bytes`` of conversations.json in all."""
    from bench.import_formats import conversation

    rng = random.Random(0)
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open(_deflated("conversations.json"), "w", force_zip64=True) as member,
    ):
        member.write(b"[")
        written, index = 1, 0
        while written < text_bytes:
            item = (b"," if index else b"") + json.dumps(conversation(index, 3, rng)).encode()
            member.write(item)
            written += len(item)
            index += 1
        member.write(b"]")
    return out.getvalue()


def mem0_list(count: int = 40_000) -> bytes:
    """mem0's ``get_all`` as one top-level list: ``count`` memories of 100 owners, each with about
    1 KB of metadata (which the import leaves out)."""
    rng = random.Random(1)
    words = ["prefers", "tea", "mornings", "trains", "to", "Porto", "weekly", "review", "of", "budget"]
    items = [
        {
            "id": f"m{i:06d}",
            "memory": f"Memory {i}: " + " ".join(rng.choice(words) for _ in range(12)),
            "user_id": f"user-{i % 100}",
            "categories": ["preferences"],
            "metadata": {"source": "chat", "context": " ".join(rng.choice(words) for _ in range(160))},
            "created_at": f"2024-07-{1 + i % 28:02d}T10:00:00+00:00",
        }
        for i in range(count)
    ]
    return json.dumps(items).encode()


_MEASURE_IMPORT = """
import json, sys, time
from pathlib import Path
from memory_mcp.store import importers
from memory_mcp.store.errors import StoreError
def status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
path, fmt = Path(sys.argv[1]), sys.argv[2]
before = status_kib("VmRSS")  # the peak is measured from here: what the import itself added
started, cpu = time.perf_counter(), time.process_time()
held = None
try:
    parsed = importers.parse(fmt, path)
    held = getattr(parsed, "cost", None) and parsed.cost.peak_bytes
    outcome = f"{len(parsed.entries)} records, {len(parsed.skipped)} skipped"
except StoreError as exc:
    outcome = f"refused: {exc}"
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
peak = status_kib("VmHWM")
print(json.dumps({"outcome": outcome, "seconds": seconds, "cpu_s": cpu, "added_mib": (peak - before) / 1024,
                  "held_mib": held / 2**20 if held else None}))
"""


def measure_import(path: Path, fmt: str, code: Path | None = None) -> dict[str, object]:
    """Parse the import at `path` in a fresh process: its outcome, time, CPU time, the RSS it added
    and the peak its own accounting held; with the store package at `code` when given."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE_IMPORT, str(path), fmt],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def store_with_importers_of(revision: str, folder: Path) -> Path:
    """A copy of the store package as it is now, with its importers as they were at `revision`."""
    import memory_mcp.store

    source = Path(memory_mcp.store.__file__).parent
    target = folder / "code"
    shutil.copytree(source, target / "memory_mcp" / "store")
    importers = target / "memory_mcp" / "store" / "importers"
    shutil.rmtree(importers)
    importers.mkdir()
    listed = subprocess.run(
        ["git", "archive", revision, "store/src/memory_mcp/store/importers"],
        capture_output=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    with tarfile.open(fileobj=io.BytesIO(listed.stdout)) as archive:
        for member in archive.getmembers():
            if member.isfile():
                data = archive.extractfile(member)
                assert data is not None
                (importers / Path(member.name).name).write_bytes(data.read())
    return target


def _import_row(name: str, size: int, result: dict[str, object]) -> str:
    held = f", held {result['held_mib']:,.0f} MiB by its own count" if result["held_mib"] is not None else ""
    return (
        f"{name:46} {size / 1024:9,.0f} KB  {result['seconds']:6.2f} s ({result['cpu_s']:.2f} s CPU), "
        f"+{result['added_mib']:,.0f} MiB RSS{held}  {result['outcome']}"
    )


_MEASURE = """
import json, resource, sys
from pathlib import Path
from memory_mcp.store import extractors
path, media_type = Path(sys.argv[1]), sys.argv[2]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    extractors.extract(path, media_type, language=None, progress=extractors.no_progress, model_dir=path.parent)
    outcome = "extracted"
except extractors.ExtractionFailed as exc:
    outcome = f"refused: {exc}"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ocr = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"outcome": outcome, "peak_mib": peak / 1024, "added_mib": (peak - before) / 1024,
                  "ocr_mib": ocr / 1024}))
"""


def measure(path: Path, media_type: str) -> dict[str, object]:
    """Extract `path` in a fresh process; its outcome, peak RSS, the RSS the extraction added and the
    peak RSS of the OCR program it ran (if any)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), media_type], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--imports-only", action="store_true", help="Only the imports, not the uploads")
    parser.add_argument("--before", metavar="REF", help="Also parse each import with the importers of REF")
    args = parser.parse_args()
    docx_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    cases = [
        ("ordinary PNG", ordinary_png, "image/png"),
        ("PNG 12,500 x 12,500", png_bomb, "image/png"),
        ("ordinary .docx", ordinary_docx, docx_type),
        (".docx, document.dat inflating to 1 GiB", docx_bomb, docx_type),
    ]
    with tempfile.TemporaryDirectory() as folder:
        for name, build, media_type in [] if args.imports_only else cases:
            data = build()
            path = Path(folder) / "upload"
            path.write_bytes(data)
            result = measure(path, media_type)
            print(
                f"{name:40} {len(data) / 1024:9,.0f} KB  peak RSS {result['peak_mib']:7,.0f} MiB "
                f"(+{result['added_mib']:,.0f} MiB while extracting; OCR process {result['ocr_mib']:,.0f} MiB)  "
                f"{result['outcome']}"
            )
        before = store_with_importers_of(args.before, Path(folder)) if args.before else None
        imports = [
            ("ChatGPT zip, one 100 MB message", chatgpt_import_bomb, "chatgpt", "export.zip"),
            ("Markdown zip, one 100 MB note", markdown_import_bomb, "markdown", "vault.zip"),
            ("ChatGPT zip, 50 MB of conversations", chatgpt_export, "chatgpt", "export.zip"),
            ("mem0 memories.json, one 50 MB list", mem0_list, "mem0", "memories.json"),
        ]
        for name, build_import, fmt, file_name in imports:
            data = build_import()
            path = Path(folder) / file_name
            path.write_bytes(data)
            print(_import_row(name, len(data), measure_import(path, fmt)), flush=True)
            if before is not None:
                print(
                    _import_row(
                        f"  with the importers of {args.before}", len(data), measure_import(path, fmt, before)
                    )
                )


if __name__ == "__main__":
    main()
