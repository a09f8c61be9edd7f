"""Hostile image files, made byte by byte where a real encoder would take long or refuse: a PNG whose
header states a huge size, an APNG whose header states another frame count, malformed and truncated
files. Each is a real file on disk a reader meets as a user would hand it over."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def chunk(cid: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC."""
    return struct.pack(">I", len(data)) + cid + data + struct.pack(">I", zlib.crc32(cid + data))


def huge_png(width: int, height: int, frames: int | None = None) -> bytes:
    """A 1-bit PNG whose header says `width` x `height` (and, with `frames`, an APNG of that many frames)
    and whose pixel data is a few bytes: readers that trust the header before decoding refuse it cheaply,
    readers that decode it allocate the stated size (or stop at the data's end)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    actl = b"" if frames is None else chunk(b"acTL", struct.pack(">II", frames, 0))
    fctl = b"" if frames is None else chunk(b"fcTL", struct.pack(">IIIIIHHBB", 0, width, height, 0, 0, 1, 2, 0, 0))
    return (SIGNATURE + chunk(b"IHDR", ihdr) + actl + fctl + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def apng(n: int, size: int = 8, duration: float = 500.0) -> bytes:
    """A real animated PNG of `n` frames (`size` x `size`, alternating colours so no encoder merges two)."""
    frames = [Image.new("RGB", (size, size), (255 * (k % 2), 0, 0)) for k in range(n)]
    buf = io.BytesIO()
    frames[0].save(buf, "PNG", save_all=True, append_images=frames[1:], duration=duration, loop=0)
    return buf.getvalue()


def gif(n: int, size: int = 8) -> bytes:
    """A real animated GIF of `n` frames."""
    frames = [Image.new("P", (size, size), k % 2) for k in range(n)]
    for f in frames:
        f.putpalette([0, 0, 0, 255, 255, 255])
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return buf.getvalue()


def chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """(type, data) of each chunk of a PNG."""
    out, at = [], 8
    while at + 8 <= len(data):
        (length,), cid = struct.unpack(">I", data[at:at + 4]), data[at + 4:at + 8]
        out.append((cid, data[at + 8:at + 8 + length]))
        at += 12 + length
    return out


def rebuilt(parts: list[tuple[bytes, bytes]]) -> bytes:
    """A PNG from (type, data) chunks, every checksum right."""
    return SIGNATURE + b"".join(chunk(cid, data) for cid, data in parts)


def restated_frames(data: bytes, n: int) -> bytes:
    """An APNG whose acTL says `n` frames, whatever it holds (checksums kept right)."""
    return rebuilt([(cid, struct.pack(">II", n, 0) if cid == b"acTL" else body) for cid, body in chunks(data)])


def frame_outside(data: bytes) -> bytes:
    """An APNG whose second frame control puts the frame outside the canvas (checksums kept right)."""
    parts, seen = [], 0
    for cid, body in chunks(data):
        if cid == b"fcTL":
            seen += 1
            if seen == 2:
                fields = list(struct.unpack(">IIIIIHHBB", body))
                fields[3] = 10_000  # x offset far past the canvas
                body = struct.pack(">IIIIIHHBB", *fields)
        parts.append((cid, body))
    return rebuilt(parts)
