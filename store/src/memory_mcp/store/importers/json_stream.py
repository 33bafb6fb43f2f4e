"""A JSON file read a value at a time: the items of a list (or of the lists an object holds) are
decoded one by one, so what an import holds is the item it is on, not the whole file.

Built on the standard library's decoder (:meth:`json.JSONDecoder.raw_decode`) over a sliding
buffer fed the file's text a megabyte at a time. An item that does not end in the buffer is
decoded again once twice as much has been read (so a large item costs about twice its parse, not
one parse a megabyte). Whether a failed decode is bad JSON or only the end of what was read so far
is told by where it failed: an unterminated string, or a failure within a few characters of the
buffer's end, means read more; anything else is bad JSON and is refused at once, with its byte.
Nesting deeper than the interpreter's recursion limit is refused as such, not a RecursionError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from ..errors import ValidationError
from .budget import Meter

CHUNK = 1024 * 1024  # characters asked for at a time
_SPACE = re.compile("[ \t\n\r\ufeff]*")  # and a byte order mark, which some tools write first
# A decode that fails this close to the end of the buffer may only have run out of text (a literal
# or a number cut short, an escape cut in two); the longest is a \uXXXX escape.
_CUT_SHORT = 8


class JsonReader:
    """The JSON text of one file, read as a stream of values."""

    def __init__(self, name: str, texts: Iterator[str], meter: Meter) -> None:
        self.name = name
        self._texts = texts
        self._meter = meter
        self._decoder = json.JSONDecoder()
        self._buf = ""
        self._pos = 0
        self._bytes_before = 0  # bytes of the file before the buffer
        self._chars_before = 0
        self._ended = False

    # --- what the formats use -------------------------------------------------------------------

    def peek(self) -> str:
        """The next character that is not white space ('' at the end of the file)."""
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or self._ended:
                return self._buf[self._pos : self._pos + 1]
            self._read(CHUNK)

    def value(self) -> Any:
        """The next value, whole."""
        self.peek()
        start = self._pos
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._ended or not self._cut_short(exc):
                    raise self.invalid(exc.msg, exc.pos) from None
            except RecursionError:
                raise ValidationError(
                    "file", f"{self.name} is nested too deeply to read (by byte {self._byte(self._pos):,})"
                ) from None
            else:
                # A number (or true, false, null) that ends with the buffer may go on in the file.
                if end < len(self._buf) or self._ended:
                    self._pos = end
                    self._meter.item = end - start
                    self._meter.check()
                    return value
            # Read at least as much again as the value has so far: a large value is decoded a
            # few times in all, not once for every megabyte of it.
            self._read(2 * (len(self._buf) - self._pos) + CHUNK)
            start = self._pos

    def items(self) -> Iterator[Any]:
        """At a list: its items one at a time, then on past its end."""
        self._expect("[")
        if self.peek() == "]":
            self._pos += 1
            return
        while True:
            yield self.value()
            self._meter.item = 0  # the caller is done with it
            found = self.peek()
            self._pos += 1
            if found == "]":
                return
            if found != ",":
                raise self.invalid("Expecting ',' delimiter", self._pos - 1)

    def members(self) -> Iterator[str]:
        """At an object: the name of each member, with the reading at its value for the caller to
        read (:meth:`value`, :meth:`items`); a value the caller leaves is read past."""
        self._expect("{")
        if self.peek() == "}":
            self._pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self.invalid("Expecting property name enclosed in double quotes", self._pos)
            name = self.value()
            if self.peek() != ":":
                raise self.invalid("Expecting ':' delimiter", self._pos)
            self._pos += 1
            self.peek()
            at = self._chars_before + self._pos
            yield name
            if self._chars_before + self._pos == at:
                self.value()
            found = self.peek()
            self._pos += 1
            if found == "}":
                return
            if found != ",":
                raise self.invalid("Expecting ',' delimiter", self._pos - 1)

    def end(self) -> None:
        """Refuse anything but white space after the value read."""
        if self.peek():
            raise self.invalid("Extra data", self._pos)
        self._meter.buffer = 0

    def invalid(self, problem: str, pos: int) -> ValidationError:
        return ValidationError(
            "file", f"{self.name} is not valid JSON ({problem} at byte {self._byte(pos):,})"
        )

    # --- the buffer -------------------------------------------------------------------------------

    def _expect(self, opening: str) -> None:
        if self.peek() != opening:
            raise self.invalid(f"Expecting '{opening}'", self._pos)
        self._pos += 1

    def _cut_short(self, exc: json.JSONDecodeError) -> bool:
        return exc.msg.startswith("Unterminated string") or exc.pos >= len(self._buf) - _CUT_SHORT

    def _byte(self, pos: int) -> int:
        """The byte of the file at ``pos`` of the buffer."""
        return self._bytes_before + self._bytes(pos)

    def _bytes(self, end: int) -> int:
        """UTF-8 bytes of the buffer up to ``end`` (its length when it is all ASCII, as JSON mostly is)."""
        return end if self._buf.isascii() else len(self._buf[:end].encode("utf-8", "surrogatepass"))

    def _read(self, wanted: int) -> None:
        """Drop what was parsed, then read until ``wanted`` characters wait (or the file ends)."""
        self._bytes_before += self._bytes(self._pos)
        self._chars_before += self._pos
        parts = [self._buf[self._pos :]]
        waiting = len(parts[0])
        while waiting < wanted:
            text = next(self._texts, None)
            if text is None:
                self._ended = True
                break
            parts.append(text)
            waiting += len(text)
            self._meter.buffer = waiting
            self._meter.check()
        self._buf = "".join(parts)
        self._pos = 0
        self._meter.buffer = len(self._buf)
