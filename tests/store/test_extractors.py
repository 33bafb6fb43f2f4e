"""Each extractor on real files made by real tools (tests/samples.py): text, pages, titles, errors."""

from __future__ import annotations

import os
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from memory_mcp.store import extractors
from memory_mcp.store.extractors import (
    DOCX,
    HEAD_BYTES,
    SUPPORTED,
    Extracted,
    ExtractionFailed,
    UnsupportedType,
    check_available,
    detect_type,
    tidy,
)
from memory_mcp.store.extractors import media as media_extractor
from memory_mcp.store.validation import MAX_CONTENT
from tests import samples


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("extractor-samples")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, fraction: float) -> None:
        self.calls.append(fraction)

    def assert_done(self) -> None:
        assert self.calls, "no progress reported"
        assert self.calls == sorted(self.calls) and self.calls[0] >= 0 and self.calls[-1] == 1.0


def run(
    path: Path, media_type: str | None = None, *, model_dir: Path | None = None, language: str | None = None
):
    media_type = media_type or detect_type(path.name, path.read_bytes()[:HEAD_BYTES])
    assert media_type is not None
    progress = Recorder()
    result = extractors.extract(
        path, media_type, language=language, progress=progress, model_dir=model_dir or path.parent
    )
    assert isinstance(result, Extracted)
    progress.assert_done()
    return result


# --- detection ---------------------------------------------------------------------------------


def test_detect_type_reads_magic_bytes_of_every_kind(files: Path) -> None:
    wav = samples.speech_wav(files / "detect.wav", "one two three")
    made = {
        samples.pdf_with_text(files / "d.pdf", ["x"]): "application/pdf",
        samples.german_png(files / "d.png"): "image/png",
        samples.docx_with_table(files / "d.docx"): DOCX,
        wav: "audio/wav",
        samples.speech_mp4(files / "d.mp4", wav): "video/mp4",
    }
    for path, expected in made.items():
        # The name never decides for a binary kind: the same bytes under a wrong name are the same.
        assert detect_type(path.name, path.read_bytes()[:HEAD_BYTES]) == expected
        assert detect_type("upload.bin", path.read_bytes()[:HEAD_BYTES]) == expected
        assert expected in SUPPORTED
    image = samples.text_image(["x"])
    for fmt, expected in (("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")):
        image.save(files / f"d.{fmt.lower()}", fmt)
        assert detect_type(None, (files / f"d.{fmt.lower()}").read_bytes()[:HEAD_BYTES]) == expected


def test_detect_type_audio_containers() -> None:
    assert detect_type("a.mp3", b"ID3\x04\x00\x00\x00\x00\x00\x00") == "audio/mpeg"
    assert detect_type(None, bytes([0xFF, 0xFB, 0x90, 0x64])) == "audio/mpeg"  # MPEG-1 layer III frame
    assert detect_type(None, bytes([0xFF, 0xF1, 0x50, 0x80])) is None  # ADTS AAC: not an MP3


def test_utf16_text_is_text_not_an_mpeg_frame(files: Path) -> None:
    """Windows PowerShell's `>` writes UTF-16 LE with a byte order mark, FF FE: an MPEG frame's sync bits."""
    notes = files / "notes.txt"
    notes.write_bytes("Die Sicherung läuft um 02:00.\r\nBackups run at 02:00.\r\n".encode("utf-16"))
    assert notes.read_bytes().startswith(b"\xff\xfe")
    assert detect_type(notes.name, notes.read_bytes()[:HEAD_BYTES]) == "text/plain"
    assert run(notes).content == "Die Sicherung läuft um 02:00.\nBackups run at 02:00."
    assert detect_type(None, b"\x00\x00\x00\x20ftypM4A \x00\x00\x02\x00") == "audio/mp4"
    assert detect_type("talk.m4a", b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00") == "audio/mp4"
    assert detect_type("talk.mp4", b"\x00\x00\x00\x20ftypisom\x00\x00\x02\x00") == "video/mp4"
    assert detect_type(None, b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x84webm") == "video/webm"
    assert detect_type(None, b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\x82\x88matroska") is None


def test_detect_type_text_kinds_by_extension_only_when_the_bytes_are_text() -> None:
    assert detect_type("notes.txt", b"plain words") == "text/plain"
    assert detect_type("README", b"plain words") == "text/plain"
    assert detect_type("notes.MD", "# Überschrift".encode()) == "text/markdown"
    assert detect_type("table.csv", b"a,b\n1,2\n") == "text/csv"
    # A multi-byte character cut by the end of the head is still text.
    assert detect_type("notes.txt", "abc ü".encode()[:-1]) == "text/plain"
    assert detect_type("notes.txt", b"\x00\x01binary\x00") is None
    assert detect_type("script.exe", b"MZ\x90\x00") is None
    assert detect_type("sheet.xlsx", b"PK\x03\x04\x14\x00[Content_Types].xml xl/workbook.xml") is None
    assert detect_type(None, b"") is None


def test_utf8_text_under_an_unknown_extension_is_plain_text_but_markup_is_not() -> None:
    for name in ("README.Debian", "LICENSE.GPL", "notes.2024", "CHANGES.v2"):
        assert detect_type(name, "Änderungen seit 1.2: keine.".encode()) == "text/plain"
    for name in ("page.html", "page.HTM", "feed.xml", "logo.svg", "letter.rtf", "print.ps"):
        assert detect_type(name, b"<html><body>plain words</body></html>") is None
    # Only UTF-8: too many binary formats pass as Windows-1252 under a name that says nothing.
    assert detect_type("notes.weird", b"caf\xe9 cr\xe8me") is None
    assert detect_type("blob.bin", bytes(range(256))) is None
    assert detect_type("empty.weird", b"") is None


def test_check_available_names_the_extra_when_a_library_or_program_is_missing(monkeypatch, tmp_path) -> None:
    for media_type in SUPPORTED:
        check_available(media_type)  # everything is installed for the tests
    with pytest.raises(UnsupportedType) as unknown:
        check_available("application/zip")
    assert unknown.value.media_type == "application/zip" and unknown.value.extra is None
    # A None entry in sys.modules is how Python marks a module as not importable.
    monkeypatch.setitem(sys.modules, "pypdf", None)
    with pytest.raises(UnsupportedType) as missing:
        check_available("application/pdf")
    assert missing.value.extra == "documents" and "memory-mcp[documents]" in str(missing.value)
    assert missing.value.media_type == "application/pdf"
    check_available("text/csv")  # the standard library kinds need nothing
    monkeypatch.delitem(sys.modules, "pypdf")
    monkeypatch.setenv("PATH", str(tmp_path))  # no tesseract on this PATH
    with pytest.raises(UnsupportedType) as no_program:
        check_available("image/png")
    assert "tesseract-ocr" in str(no_program.value) and no_program.value.extra == "documents"


# --- text, Markdown, CSV -----------------------------------------------------------------------


def test_tidy_keeps_paragraphs_and_drops_what_cannot_be_stored() -> None:
    assert (
        tidy("  one\t two  \r\n\r\n\r\n\nthree\x00\x07 \ufefffour\f five ") == "one two\n\nthree four\nfive"
    )


def test_text_file_decodes_utf8_and_windows_1252(files: Path) -> None:
    (files / "utf8.txt").write_bytes("\ufeffCafé  au lait\n\n\n\nzwei Sätze.".encode())
    result = run(files / "utf8.txt")
    assert result.content == "Café au lait\n\nzwei Sätze." and result.title is None
    (files / "cp1252.txt").write_bytes("Größe – 5 €".encode("cp1252"))
    assert run(files / "cp1252.txt").content == "Größe – 5 €"
    (files / "blank.txt").write_text(" \n\t\n")
    with pytest.raises(ExtractionFailed, match="no text"):
        run(files / "blank.txt", "text/plain")


def test_markdown_title_is_the_first_heading_outside_code(files: Path) -> None:
    (files / "notes.md").write_text(
        "---\ntitle: front matter\n---\nIntro line.\n\n```\n# not a heading\n```\n\n## Release   plan ##\n\nShip it.\n"
    )
    result = run(files / "notes.md")
    assert result.title == "Release plan"
    assert "front matter" not in result.content and "Ship it." in result.content
    (files / "setext.md").write_text("Quarterly goals\n===============\n\nGrow.\n")
    assert run(files / "setext.md").title == "Quarterly goals"
    (files / "plain.md").write_text("No heading at all.\n")
    assert run(files / "plain.md").title is None


def test_a_csv_is_a_summary_and_records_that_name_their_columns(files: Path) -> None:
    rows = samples.csv_rows(45)
    result = run(samples.csv_file(files / "cities.csv", rows))
    summary, *groups = result.sections
    assert summary.text.startswith("A table of 45 rows and 3 columns: city (text, 45 distinct values); ")
    assert (
        "country (text: Austria, Italy)" in summary.text
        and "population (integer, 1000 to 1044)" in summary.text
    )
    assert len(groups) >= 3 and all(s.separate and len(s.text) <= MAX_CONTENT for s in result.sections)
    seen = [line for group in groups for line in group.text.split("\n")]
    assert seen == [f"city: {c}; country: {k}; population: {p}" for c, k, p in rows]  # never a raw row
    assert result.metadata == {"rows": 45, "columns": 3}


def test_csv_types_empty_cells_and_long_rows(files: Path) -> None:
    (files / "people.csv").write_text(
        "name,joined,score,active,note\nAda,2021-03-01,1.5,yes,\nBert,2019-11-30,-2,no,late\n"
    )
    summary, records = run(files / "people.csv").sections
    assert "joined (date, 2019-11-30 to 2021-03-01)" in summary.text and "score (number" in summary.text
    assert "active (boolean: yes, no)" in summary.text and "note (text: late, 1 empty)" in summary.text
    assert records.text.split("\n")[0] == "name: Ada; joined: 2021-03-01; score: 1.5; active: yes"
    rows = [[f"r{n}", "x" * 300, "y"] for n in range(30)]
    result = run(samples.csv_file(files / "wide.csv", rows))
    assert all(len(s.text) <= MAX_CONTENT for s in result.sections)
    assert sum(len(s.text.split("\n")) for s in result.sections[1:]) == 30


def test_csv_semicolons_and_quoted_newlines(files: Path) -> None:
    (files / "semi.csv").write_text('name;note\nAnna;"two\nlines"\nBert;plain\n')
    result = run(files / "semi.csv")
    assert result.sections[1].text == "name: Anna; note: two lines\nname: Bert; note: plain"


# --- PDF, OCR ----------------------------------------------------------------------------------


def test_text_pdf_one_section_a_page(files: Path) -> None:
    result = run(samples.pdf_with_text(files / "runbook.pdf", samples.PDF_PAGES))
    assert [s.page for s in result.sections] == [1, 2, 3, 4]
    for section, text in zip(result.sections, samples.PDF_PAGES, strict=True):
        assert section.text == text
    assert result.metadata == {"pages": 4, "ocrPages": 0}


def test_running_headers_and_page_numbers_are_left_out(files: Path) -> None:
    bodies = [text.split(". ", 1)[1] for text in samples.PDF_PAGES]
    pages = [
        f"Operations handbook, edition 3\n{body}\nThe freeze is announced a week ahead.\n"
        f"Company confidential\nPage {n} of 4"
        for n, body in enumerate(bodies, start=1)
    ]
    result = run(samples.pdf_with_text(files / "handbook.pdf", pages))
    # A line that recurs away from the page's edges is the page's own.
    assert [s.text for s in result.sections] == [
        f"{b}\nThe freeze is announced a week ahead." for b in bodies
    ]
    # Two pages are too few to tell a running header from a repeated line.
    short = run(samples.pdf_with_text(files / "two.pdf", pages[:2]))
    assert [s.text for s in short.sections] == pages[:2]


def test_a_chapters_running_header_is_left_out_too(files: Path) -> None:
    # Each chapter's header runs through its own pages only: none is on half of the document's.
    chapters = ["Chapter 1: Introduction"] * 2 + ["Chapter 2: Utilities"] * 3 + ["Chapter 3: Reference"] * 2
    topics = ["installing", "parsing", "encoding", "decoding", "errors", "copying", "indexes"]
    bodies = [f"This page is about {topic}, and nothing else is." for topic in topics]
    pages = [
        f"{chapter} {n}\n{body}" for n, (chapter, body) in enumerate(zip(chapters, bodies, strict=True), 1)
    ]
    # A table's heading row repeated at the top of the next page carries no page number: it stays.
    pages[5] = f"service | owner\n{bodies[5]}"
    pages[6] = f"service | owner\n{bodies[6]}"
    result = run(samples.pdf_with_text(files / "manual.pdf", pages))
    assert [s.text for s in result.sections] == bodies[:5] + [f"service | owner\n{b}" for b in bodies[5:]]


def test_scanned_pdf_pages_are_read_by_ocr_in_order(files: Path) -> None:
    result = run(samples.scanned_pdf(files / "scan.pdf"))
    assert result.metadata["ocrPages"] == 1 and result.sections[0].page == 1
    for line in samples.SCAN_TEXT:
        assert line in result.content
    # Several scanned pages are read at once; their sections still come in page order.
    pictures = [
        samples.text_image([f"Scanned page number {word} of the ledger."]) for word in ("one", "two", "three")
    ]
    pictures[0].save(files / "ledger.pdf", "PDF", resolution=150, save_all=True, append_images=pictures[1:])
    ledger = run(files / "ledger.pdf")
    assert [s.page for s in ledger.sections] == [1, 2, 3] and ledger.metadata["ocrPages"] == 3
    assert [s.text for s in ledger.sections] == [
        f"Scanned page number {w} of the ledger." for w in ("one", "two", "three")
    ]


def test_mixed_pdf_ocrs_only_the_scanned_page(files: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.append(str(samples.pdf_with_text(files / "m1.pdf", samples.PDF_PAGES[:2])))
    writer.append(str(samples.scanned_pdf(files / "m2.pdf")))
    writer.write(files / "mixed.pdf")
    result = run(files / "mixed.pdf")
    assert result.metadata == {"pages": 3, "ocrPages": 1}
    assert [s.page for s in result.sections] == [1, 2, 3]
    assert samples.SCAN_TEXT[0] in result.sections[2].text


def test_pdf_failures_say_why(files: Path) -> None:
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=str(samples.pdf_with_text(files / "plain.pdf", ["secret plans"])))
    writer.encrypt("hunter2", algorithm="AES-256")
    writer.write(files / "locked.pdf")
    with pytest.raises(ExtractionFailed, match="encrypted"):
        run(files / "locked.pdf", "application/pdf")
    (files / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >>\nthis is not a pdf")
    with pytest.raises(ExtractionFailed, match="corrupt"):
        run(files / "broken.pdf", "application/pdf")
    samples.text_image([" "]).save(files / "blank.pdf", "PDF", resolution=150)
    with pytest.raises(ExtractionFailed, match="no text found"):
        run(files / "blank.pdf", "application/pdf")


def _pdf_of_one_stream(path: Path, content: bytes) -> Path:
    """A one-page PDF whose page is one deflated content stream."""
    import zlib

    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
        b"/Contents 4 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%b\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%b\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def test_a_pdf_page_that_inflates_past_the_readers_limit_is_refused(files: Path) -> None:
    """A page of well under a megabyte whose content stream inflates to 80 MB (a PDF "zip bomb")."""
    line = b"BT /F1 12 Tf 72 720 Td (spam spam spam) Tj ET\n"
    bomb = _pdf_of_one_stream(files / "bomb.pdf", line * (80_000_000 // len(line)))
    assert bomb.stat().st_size < 2**20
    with pytest.raises(ExtractionFailed, match="unpacks to more than 75 MB"):
        run(bomb, "application/pdf")
    # The same construction with an ordinary page reads.
    assert run(_pdf_of_one_stream(files / "page.pdf", line), "application/pdf").content == "spam spam spam"


def test_png_with_german_text_keeps_umlauts(files: Path) -> None:
    result = run(samples.german_png(files / "hinweis.png"))
    for line in samples.GERMAN_TEXT:
        assert line in result.content
    assert result.metadata["ocrPages"] == 1


def test_transparent_webp_and_gif_are_read(files: Path) -> None:
    from PIL import Image

    picture = samples.text_image(["Transparent Pelican"]).convert("L")
    rgba = Image.new("RGBA", picture.size, (0, 0, 0, 0))
    rgba.putalpha(Image.eval(picture, lambda v: 255 - v))  # black letters on a clear background
    rgba.save(files / "clear.webp", "WEBP", lossless=True)
    assert "Transparent Pelican" in run(files / "clear.webp").content
    samples.text_image(["Animated Heron"]).save(files / "still.gif", "GIF")
    assert "Animated Heron" in run(files / "still.gif").content


def test_image_failures_say_why(files: Path) -> None:
    (files / "cut.png").write_bytes((samples.german_png(files / "whole.png")).read_bytes()[:200])
    with pytest.raises(ExtractionFailed, match="corrupt"):
        run(files / "cut.png", "image/png")
    samples.text_image([""]).save(files / "empty.png")
    with pytest.raises(ExtractionFailed, match="no text found"):
        run(files / "empty.png", "image/png")


# --- Word --------------------------------------------------------------------------------------


def test_docx_paragraphs_tables_and_heading_title(files: Path) -> None:
    result = run(samples.docx_with_table(files / "storage.docx"))
    assert result.title == samples.DOCX_HEADING
    content = result.content
    assert samples.DOCX_PARAGRAPH in content
    for row in samples.DOCX_TABLE:
        assert " | ".join(row) in content
    # Document order: heading, paragraph, table, then the second heading.
    assert (
        content.index(samples.DOCX_PARAGRAPH) < content.index("billing | Marta") < content.index("Contacts")
    )
    assert result.metadata == {"paragraphs": 4, "tables": 1}


def test_docx_failures_say_why(files: Path) -> None:
    with zipfile.ZipFile(files / "fake.docx", "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<not-closed")
    with pytest.raises(ExtractionFailed, match="corrupt"):
        run(files / "fake.docx", DOCX)
    import docx

    docx.Document().save(str(files / "empty.docx"))
    with pytest.raises(ExtractionFailed, match="no text found"):
        run(files / "empty.docx", DOCX)


# --- audio and video ---------------------------------------------------------------------------


def test_wav_from_espeak_is_transcribed_with_times(files: Path, model_dir: Path) -> None:
    result = run(samples.speech_wav(files / "speech.wav"), model_dir=model_dir, language="en-GB")
    text = result.content.lower()
    for word in ("quarterly", "planning", "thursday", "budget"):
        assert word in text
    section = result.sections[0]
    assert section.start_s is not None and section.end_s is not None and 0 <= section.start_s < section.end_s
    assert result.metadata["language"] == "en" and result.metadata["hasVideo"] is False
    assert 4 < float(result.metadata["durationSeconds"]) < 10  # type: ignore[arg-type]


def test_mp4_audio_track_is_transcribed(files: Path, model_dir: Path) -> None:
    video = samples.speech_mp4(files / "speech.mp4", samples.speech_wav(files / "speech2.wav"))
    result = run(video, model_dir=model_dir)
    assert "planning meeting" in result.content.lower()
    assert result.metadata["hasVideo"] is True and result.metadata["audioCodec"] == "aac"


def test_mp3_m4a_and_webm_are_detected_probed_and_read(files: Path, model_dir: Path) -> None:
    import subprocess

    wav = samples.speech_wav(files / "containers.wav")
    made = {
        "speech.mp3": (["-c:a", "libmp3lame"], "audio/mpeg", "mp3"),
        "speech.m4a": (["-c:a", "aac"], "audio/mp4", "aac"),
        "speech.webm": (
            [
                "-f",
                "lavfi",
                "-i",
                "color=c=navy:s=160x120:r=5",
                "-shortest",
                "-c:v",
                "libvpx",
                "-c:a",
                "libopus",
            ],
            "video/webm",
            "opus",
        ),
    }
    for name, (codec, media_type, audio_codec) in made.items():
        subprocess.run(
            ["ffmpeg", "-loglevel", "error", "-y", "-i", str(wav), *codec, str(files / name)], check=True
        )
        assert detect_type(name, (files / name).read_bytes()[:HEAD_BYTES]) == media_type
        info = media_extractor.probe(files / name)
        assert info["audioCodec"] == audio_codec and 4 < float(info["durationSeconds"]) < 10  # type: ignore[arg-type]
    result = run(files / "speech.webm", model_dir=model_dir, language="en")
    assert "planning meeting" in result.content.lower() and result.metadata["hasVideo"] is True


def test_media_failures_say_why(files: Path, model_dir: Path) -> None:
    with pytest.raises(ExtractionFailed, match="no speech found"):
        run(samples.silent_wav(files / "silence.wav"), model_dir=model_dir)
    (files / "broken.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt garbage")
    with pytest.raises(ExtractionFailed, match="corrupt"):
        run(files / "broken.wav", "audio/wav", model_dir=model_dir)
    samples.text_image(["x"]).save(files / "mute.gif", "GIF")
    import subprocess

    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "color=c=red:s=64x64:r=5",
            "-t",
            "1",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            str(files / "mute.mp4"),
        ],
        check=True,
    )
    with pytest.raises(ExtractionFailed, match="no audio track"):
        run(files / "mute.mp4", "video/mp4", model_dir=model_dir)


def test_whisper_model_is_joined_once_even_by_two_workers_at_once(tmp_path: Path) -> None:
    folders: list[Path] = []
    errors: list[BaseException] = []

    def assemble() -> None:
        try:
            folders.append(media_extractor.model_folder(tmp_path))
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=assemble) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors and folders == [tmp_path / "whisper-base"] * 2
    parts = [media_extractor._package_data(name) for name in media_extractor._PARTS]
    expected = (parts[0] / "model.bin.part1").stat().st_size + (parts[1] / "model.bin.part2").stat().st_size
    assert (tmp_path / "whisper-base" / "model.bin").stat().st_size == expected
    assert sorted(os.listdir(tmp_path)) == ["whisper-base"]  # no staging folder left behind
    assert sorted(os.listdir(tmp_path / "whisper-base")) == [
        "config.json",
        "model.bin",
        "tokenizer.json",
        "vocabulary.txt",
    ]
    # Assembled already: the second call is a look-up.
    assert media_extractor.model_folder(tmp_path) == tmp_path / "whisper-base"


def test_whisper_language_codes() -> None:
    assert media_extractor.whisper_language("de-CH") == "de"
    assert media_extractor.whisper_language("IT") == "it"
    assert media_extractor.whisper_language("xx") is None
    assert media_extractor.whisper_language(None) is None
