"""Text in pictures: Debian's Tesseract, for images and scanned PDF pages.

Tesseract runs as a program, one page at a time, with one OpenMP thread: on a busy two-core
machine its default of one thread a core took 11 to 15 s a dense A4 page, one thread 3.5 s (the
threads spin waiting for each other). The limit is set for the program alone; an OpenMP variable
set in this process would also hold back the speech model's threads.
"""

from __future__ import annotations

import functools
import io
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Extracted, ExtractionFailed, Progress, Section, tidy

if TYPE_CHECKING:
    from PIL.Image import Image

# English, German and Italian together: with English alone Tesseract reads "Größere Änderungen" as
# "GroBere Anderungen"; the three together cost little more time.
OCR_LANGUAGES = "eng+deu+ita"
# Tesseract reads best at about 300 dpi for small print, but 200 dpi halves the time and still
# reads body text; scanned pages are rendered at this resolution.
OCR_DPI = 200
# Larger pictures are scaled down before OCR: beyond this many pixels Tesseract gains nothing on
# ordinary print and a poster-sized scan would take minutes and gigabytes.
MAX_OCR_PIXELS = 25_000_000
# An image file with more pixels is refused before it is decoded: decoding holds every pixel in
# memory (a 34 KB PNG of 12,500 x 12,500 blank pixels, under Pillow's own bomb limit, took 1.7 GB
# that stayed). 50 million pixels is a 600 dpi A3 scan or a 50-megapixel photo.
MAX_IMAGE_PIXELS = 50_000_000
# A page that takes longer is not ordinary print (a dense map, noise); give up on the file.
OCR_PAGE_TIMEOUT_S = 300.0


def _tesseract() -> str:
    binary = shutil.which("tesseract")
    if binary is None:
        raise ExtractionFailed(
            "OCR needs the tesseract program (Debian package tesseract-ocr), not installed here"
        )
    return binary


# OCR is the long, batch part of a scanned document: run below normal priority (nice 10), so that
# the small files of other spaces, taken beside it (fair turns, server/documents_worker.py), and the
# requests of everyone get the CPU first.
OCR_NICENESS = 10


def _run(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
    nice = shutil.which("nice")
    lower = [nice, "-n", str(OCR_NICENESS)] if nice else []
    try:
        return subprocess.run(
            [*lower, _tesseract(), *args],
            input=stdin,
            capture_output=True,
            env=env,
            timeout=OCR_PAGE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ExtractionFailed(f"OCR gave up on a page after {OCR_PAGE_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise ExtractionFailed(f"the OCR program tesseract cannot run here ({exc})") from exc


@functools.cache
def _missing_languages() -> tuple[str, ...]:
    listed = _run(["--list-langs"])
    # The first line is a heading ("List of available languages in ...:").
    installed = {line.strip() for line in listed.stdout.decode(errors="replace").splitlines()[1:]}
    return tuple(lang for lang in OCR_LANGUAGES.split("+") if lang not in installed)


def read_image(image: Image) -> str:
    """The tidied text Tesseract reads in one picture ('' when it reads none)."""
    from PIL import Image as PILImage

    missing = _missing_languages()
    if missing:
        packages = ", ".join(f"tesseract-ocr-{lang}" for lang in missing)
        raise ExtractionFailed(
            f"OCR needs the Tesseract language data {packages}, not installed on this server"
        )
    if image.mode not in ("RGB", "L"):
        # Transparent pixels onto white: Tesseract reads transparent as black.
        rgba = image.convert("RGBA")
        background = PILImage.new("RGB", rgba.size, "white")
        background.paste(rgba, mask=rgba.getchannel("A"))
        image = background
    pixels = image.width * image.height
    if pixels > MAX_OCR_PIXELS:
        factor = (MAX_OCR_PIXELS / pixels) ** 0.5
        image = image.resize((max(1, int(image.width * factor)), max(1, int(image.height * factor))))
    # Uncompressed PNM through a pipe: no temporary file, nothing to encode.
    picture = io.BytesIO()
    image.save(picture, "PPM")
    done = _run(["stdin", "stdout", "-l", OCR_LANGUAGES], stdin=picture.getvalue())
    if done.returncode != 0:
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        raise ExtractionFailed(f"OCR failed on the picture ({reason[-1] if reason else done.returncode})")
    return tidy(done.stdout.decode("utf-8", errors="replace"))


def extract_image(path: Path, progress: Progress) -> Extracted:
    """The text in a PNG, JPEG, WebP or GIF (its first frame)."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with PILImage.open(path) as image:
            image.seek(0)
            width, height = image.size
            if width * height > MAX_IMAGE_PIXELS:
                raise ExtractionFailed(
                    f"the image has {width} x {height} pixels, over the limit of {MAX_IMAGE_PIXELS:,}; "
                    "scale it down and upload it again"
                )
            image.load()
            text = read_image(image)
    except UnidentifiedImageError as exc:
        raise ExtractionFailed("the image is corrupt or not in a format we read") from exc
    except PILImage.DecompressionBombError as exc:
        raise ExtractionFailed("the image is too large to read (over 178 million pixels)") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        # PIL reports truncated and malformed files as OSError or SyntaxError.
        raise ExtractionFailed(f"the image is corrupt ({exc})") from exc
    progress(1.0)
    if not text:
        raise ExtractionFailed("no text found in the image")
    return Extracted(
        sections=[Section(text=text)], metadata={"ocrPages": 1, "width": width, "height": height}
    )
