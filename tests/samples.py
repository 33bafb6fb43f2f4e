"""Real files of every kind we extract, made at test time with real tools (no committed binaries).

Each maker writes one file into a folder and returns its path. The texts are known, so a test can
look for them in what an extractor read. The text-layer PDF is written by hand (a PDF is text with
byte offsets); scans and pictures are drawn with Pillow and Debian's DejaVu font; speech is spoken
by Debian's espeak-ng and put in an MP4 by ffmpeg.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL.Image import Image

# One fact a page, each with a word that appears nowhere else, so a search can find its page.
PDF_PAGES = [
    "Page one of the runbook. The deployment freeze starts on Friday at noon.",
    "Page two of the runbook. The billing service runs on PostgreSQL 16 with three replicas.",
    "Page three of the runbook. Rotate the ingress certificates every ninety days.",
    "Page four of the runbook. The pelican dashboard shows the checkout latency.",
]
SCAN_TEXT = [
    "Scanned invoice from the Heron Logistics warehouse.",
    "The delivery arrived on the fourth of May.",
]
GERMAN_TEXT = ["Größere Änderungen müssen vorher geprüft werden.", "Die Rechnung für München ist überfällig."]
DOCX_HEADING = "Storage runbook"
DOCX_PARAGRAPH = "The archive cluster keeps seven years of audit records."
DOCX_TABLE = [
    ["service", "owner", "database"],
    ["billing", "Marta", "PostgreSQL 16"],
    ["search", "Jonas", "OpenSearch"],
]
CSV_HEADER = ["city", "country", "population"]
SPEECH_TEXT = "The quarterly planning meeting moves to Thursday afternoon. Please bring the budget figures."


def font_path() -> Path:
    """Debian's DejaVu Sans (fonts-dejavu-core)."""
    for candidate in Path("/usr/share/fonts").rglob("DejaVuSans.ttf"):
        return candidate
    raise FileNotFoundError("DejaVuSans.ttf not found: install the Debian package fonts-dejavu-core")


def _pdf_string(text: str) -> str:
    return "(" + text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"


def pdf_with_text(
    path: Path, pages: list[str], *, images: list[tuple[bytes, int, int]] | None = None
) -> Path:
    """A PDF with a real text layer: each page's text in Helvetica, one line per line of the text.

    `images` (JPEG bytes, width, height), one per page, are drawn under the text: pages of the
    size of a photo-heavy report, whose text layer still carries the words.
    """
    objects: list[bytes] = [
        b"",
        b"",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    kids: list[str] = []
    for index, text in enumerate(pages):
        body = ["BT", "/F1 11 Tf", "14 TL", "50 780 Td"]
        body += [f"{_pdf_string(line)} Tj T*" for line in text.split("\n")]
        body.append("ET")
        resources = "/Font << /F1 3 0 R >>"
        if images is not None:
            jpeg, width, height = images[index]
            objects.append(
                b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceRGB "
                b"/BitsPerComponent 8 /Filter /DCTDecode /Length %d >>\nstream\n"
                % (width, height, len(jpeg))
                + jpeg
                + b"\nendstream"
            )
            resources += f" /XObject << /Im1 {len(objects)} 0 R >>"
            body = ["q 495 0 0 700 50 60 cm /Im1 Do Q", *body]
        stream = "\n".join(body).encode("cp1252")
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << {resources} >> "
            f"/Contents {len(objects)} 0 R >>".encode()
        )
        kids.append(f"{len(objects)} 0 R")
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R >>"
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>".encode()
    with open(path, "wb") as out:
        out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
        offsets = []
        for number, obj in enumerate(objects, start=1):
            offsets.append(out.tell())
            out.write(b"%d 0 obj\n" % number + obj + b"\nendobj\n")
        xref = out.tell()
        out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
        out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
        out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return path


def text_image(lines: list[str], *, width: int = 1700, size: int = 34) -> Image:
    """A white picture with black lines of text, as a scanner or a screenshot would make it."""
    from PIL import Image, ImageDraw, ImageFont

    face = ImageFont.truetype(str(font_path()), size)
    image = Image.new("RGB", (width, 60 + int(size * 1.8) * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for index, line in enumerate(lines):
        draw.text((40, 30 + int(size * 1.8) * index), line, fill="black", font=face)
    return image


def scanned_pdf(path: Path, lines: list[str] = SCAN_TEXT) -> Path:
    """An image-only PDF page (no text layer), as a scanner writes it."""
    text_image(lines).save(path, "PDF", resolution=150)
    return path


def german_png(path: Path) -> Path:
    text_image(GERMAN_TEXT).save(path, "PNG")
    return path


def docx_with_table(path: Path) -> Path:
    import docx

    document = docx.Document()
    document.add_heading(DOCX_HEADING, level=1)
    document.add_paragraph(DOCX_PARAGRAPH)
    table = document.add_table(rows=len(DOCX_TABLE), cols=len(DOCX_TABLE[0]))
    for r, row in enumerate(DOCX_TABLE):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_heading("Contacts", level=2)
    document.add_paragraph("Page the storage on-call through the incident channel.")
    document.save(str(path))
    return path


def csv_rows(count: int) -> list[list[str]]:
    return [[f"city{n:04d}", "Italy" if n % 2 else "Austria", str(1000 + n)] for n in range(count)]


def csv_file(path: Path, rows: list[list[str]] | None = None) -> Path:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_HEADER)
        writer.writerows(rows if rows is not None else csv_rows(45))
    return path


def speech_wav(path: Path, text: str = SPEECH_TEXT) -> Path:
    """Speech spoken by espeak-ng (Debian), 22 kHz mono WAV."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise FileNotFoundError("espeak-ng not found: install the Debian package espeak-ng")
    subprocess.run([espeak, "-s", "150", "-w", str(path), text], check=True, capture_output=True)
    return path


def speech_mp4(path: Path, wav: Path) -> Path:
    """An MP4 video (a still frame, H.264 if ffmpeg has it) whose AAC audio track is the WAV."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise FileNotFoundError("ffmpeg not found: install the Debian package ffmpeg")
    subprocess.run(
        [
            ffmpeg,
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "color=c=navy:s=320x240:r=5",
            "-i",
            str(wav),
            "-shortest",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-b:a",
            "96k",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    return path


def silent_wav(path: Path, seconds: float = 3.0) -> Path:
    import wave

    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"\x00\x00" * int(16000 * seconds))
    return path


def blank_pdf(pages: int) -> bytes:
    """A PDF of `pages` blank pages (no text layer: each would go to OCR)."""
    import io

    import pypdf

    writer = pypdf.PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=612, height=792)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
