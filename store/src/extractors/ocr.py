"""Text in pictures: Debian's Tesseract through pytesseract, for images and scanned PDF pages."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from .base import Extracted, ExtractionFailed, Progress, Section, tidy

if TYPE_CHECKING:
    from PIL.Image import Image

# English, German and Italian together: with English alone Tesseract reads "Größere Änderungen" as
# "GroBere Anderungen"; the three together cost little more time (about 1 s a page).
OCR_LANGUAGES = "eng+deu+ita"
# Tesseract reads best at about 300 dpi for small print, but 200 dpi halves the time and still
# reads body text; scanned pages are rendered at this resolution.
OCR_DPI = 200
# Larger pictures are scaled down before OCR: beyond this many pixels Tesseract gains nothing on
# ordinary print and a poster-sized scan would take minutes and gigabytes.
MAX_OCR_PIXELS = 25_000_000


@functools.cache
def _missing_languages() -> tuple[str, ...]:
    import pytesseract

    try:
        installed = set(pytesseract.get_languages(config=""))
    except (pytesseract.TesseractError, pytesseract.TesseractNotFoundError, OSError) as exc:
        raise ExtractionFailed(f"the OCR program tesseract cannot run here ({exc})") from exc
    return tuple(lang for lang in OCR_LANGUAGES.split("+") if lang not in installed)


def read_image(image: Image) -> str:
    """The tidied text Tesseract reads in one picture ('' when it reads none)."""
    import pytesseract
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
    try:
        text: str = pytesseract.image_to_string(image, lang=OCR_LANGUAGES)
    except pytesseract.TesseractError as exc:
        raise ExtractionFailed(f"OCR failed on the picture ({exc.message or exc.status})") from exc
    return tidy(text)


def extract_image(path: Path, progress: Progress) -> Extracted:
    """The text in a PNG, JPEG, WebP or GIF (its first frame)."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    try:
        with PILImage.open(path) as image:
            image.seek(0)
            width, height = image.size
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
