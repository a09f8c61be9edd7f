"""One bounded path from an image file to pixels: every image and clip evprobe reads opens here.

- Formats: PNG (still or animated), JPEG, WebP and GIF. Pillow's other plugins are never tried (some
  hand the file to an outside program: EPS to Ghostscript).
- A pixel budget, read from the header before any pixel is decoded: each image (or frame) at most
  `PixelBudget.image` pixels, all frames of one file together at most `PixelBudget.clip`. The
  defaults (4096 x 4096 per image, 2^26 per file: about 50 MB and 200 MB as RGB) hold every
  benchmark evprobe writes (672 x 672 sheets; up to 256 frames of 336 x 336) many times over. A
  model that really reads larger images gets them by raising the budget in the environment
  (EVPROBE_MAX_IMAGE_PIXELS, EVPROBE_MAX_CLIP_PIXELS): one setting that reaches every command
  and function that decodes, rather than a flag on each.
- A frame count: given `frames` (the benchmark's: 1 for sheets, bench.json's for clips), a file
  holding another count is refused from its header, before decoding (an APNG states its count).
- Anything Pillow cannot read (truncated, a broken chunk, a malformed APNG or GIF, a file that is
  not an image) is one `InputError` naming the file, never Pillow's traceback.

`check_files` is a run's preflight, before a model loads: each file's header, budget and frame
count; a still PNG (a sheet) then has every chunk's checksum checked up to IEND (truncation, torn
or edited bytes) without inflating pixels, about 0.3 ms a file against about 17 ms to decode one
(x 864 sheets on the main set); an animation or another format is decoded whole, since nothing
cheaper reaches an APNG's frame controls. A still whose checksums hold but whose compressed stream
is wrong anyway (made so on purpose) passes and is refused when decoded, in the same one line.
"""

from __future__ import annotations

import io
import os
import stat
import struct
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from evprobe.core.errors import ConfigError, InputError

FORMATS = ("PNG", "JPEG", "WEBP", "GIF")
IMAGE_ENV = "EVPROBE_MAX_IMAGE_PIXELS"
CLIP_ENV = "EVPROBE_MAX_CLIP_PIXELS"
DEFAULT_IMAGE_PIXELS = 4096 * 4096
DEFAULT_CLIP_PIXELS = 2**26
BYTES_PER_PIXEL = 8  # a file's size bound: 16-bit RGBA stored uncompressed, per pixel of the clip budget
FIX = "regenerate the benchmark (evprobe generate) or replace the file"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class PixelBudget:
    """The most pixels one image (or frame) and one file (all its frames) may hold."""

    image: int = DEFAULT_IMAGE_PIXELS
    clip: int = DEFAULT_CLIP_PIXELS

    @classmethod
    def from_env(cls) -> PixelBudget:
        """The budget the environment sets (module docstring), else the defaults; a value that is not
        a positive whole number is one ConfigError."""
        values = [_env_pixels(IMAGE_ENV, DEFAULT_IMAGE_PIXELS), _env_pixels(CLIP_ENV, DEFAULT_CLIP_PIXELS)]
        budget = cls(*values)
        # Pillow's own bomb guard warns above MAX_IMAGE_PIXELS and refuses above twice that; the
        # budget is checked first, so a user who raised it is not then stopped by Pillow.
        if Image.MAX_IMAGE_PIXELS is not None and budget.image > Image.MAX_IMAGE_PIXELS:
            Image.MAX_IMAGE_PIXELS = budget.image
        return budget

    @property
    def max_bytes(self) -> int:
        return BYTES_PER_PIXEL * self.clip + (1 << 20)


def _env_pixels(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name}={text!r}: not a positive whole number of pixels; unset it (default {default:,}) "
                          f"or give one, e.g. {name}={4 * default}")
    return value


@dataclass(frozen=True)
class Header:
    """What a file's header says: its format, size (one frame) and frame count."""

    format: str
    width: int
    height: int
    frames: int


def read_bytes(path: Path, budget: PixelBudget | None = None) -> bytes:
    """A regular file's bytes (a FIFO or device is refused, never read), refusing in one line a file
    larger than any image within the budget, before reading it and while reading it."""
    budget = budget or PixelBudget.from_env()
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path}: not a regular file; {FIX}")
        with path.open("rb") as f:
            data = f.read(budget.max_bytes + 1) if st.st_size <= budget.max_bytes else b""
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror or type(err).__name__}); {FIX}") from None
    if st.st_size > budget.max_bytes or len(data) > budget.max_bytes:
        raise InputError(f"{path}: {max(st.st_size, len(data)):,} bytes, more than an image within the pixel budget "
                         f"can take ({budget.max_bytes:,}); {FIX}, or raise {CLIP_ENV} if the model really reads such "
                         "files")
    return data


def _over(name: str, what: str, limit: int, env: str, per: str) -> InputError:
    return InputError(f"{name}: {what}, over the pixel budget of {limit:,} {per}; {FIX}, or raise it "
                      f"({env}=N in the environment) if the model really reads such images")


def _png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's IHDR, read before Pillow opens it (so Pillow's bomb warning or
    error never speaks first); None for any other file."""
    if data[:8] != _PNG_SIGNATURE or data[12:16] != b"IHDR" or len(data) < 24:
        return None
    return struct.unpack(">II", data[16:24])


def _reason(err: BaseException, data: bytes) -> str:
    """Why Pillow could not read the file, in a few words. Pillow's open says only "cannot identify
    image file" when a plugin refused it; for a PNG (what evprobe writes) its plugin's own words."""
    if isinstance(err, UnidentifiedImageError):
        if data[:8] == _PNG_SIGNATURE:
            from PIL.PngImagePlugin import PngImageFile

            try:
                PngImageFile(io.BytesIO(data)).close()
            except Exception as inner:  # noqa: BLE001 - only to word the refusal, which follows anyway
                err = inner
        if isinstance(err, UnidentifiedImageError):
            return "not an image Pillow reads as " + ", ".join(FORMATS)
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:200]


@contextmanager
def _opened(data: bytes, name: str, budget: PixelBudget) -> Iterator[Image.Image]:
    """The file open in Pillow (nothing decoded yet) once its size is within the budget; every error
    Pillow raises opening or decoding it inside the block becomes one InputError naming the file."""
    png = _png_size(data)
    if png is not None and png[0] * png[1] > budget.image:
        raise _over(name, f"{png[0]}x{png[1]} pixels", budget.image, IMAGE_ENV, "per image")
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as im:
            if im.width * im.height > budget.image:
                raise _over(name, f"{im.width}x{im.height} pixels", budget.image, IMAGE_ENV, "per image")
            if im.format == "GIF" and not data.rstrip(b"\0").endswith(b";"):
                # Pillow reads a cut GIF as the frames before the cut, without a word
                raise InputError(f"{name}: not a readable image (a GIF cut short: no trailer); {FIX}")
            yield im
    except InputError:
        raise
    except Image.DecompressionBombError as err:
        raise _over(name, _reason(err, data), budget.image, IMAGE_ENV, "per image") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, TypeError, KeyError, struct.error,
            zlib.error) as err:  # Pillow's plugins raise each of these on malformed input
        raise InputError(f"{name}: not a readable image ({_reason(err, data)}); {FIX}") from None


def _header(im: Image.Image, name: str, budget: PixelBudget, frames: int | None) -> Header:
    n = int(getattr(im, "n_frames", 1))
    if frames is not None and n != frames:
        want = "images are still sheets" if frames == 1 else f"clips have {frames} frames"
        raise InputError(f"{name}: {n:,} frame{'s' * (n != 1)}, but the benchmark's {want}; {FIX}")
    if n * im.width * im.height > budget.clip:
        raise _over(name, f"{n:,} frames of {im.width}x{im.height} pixels", budget.clip, CLIP_ENV, "per file")
    return Header(str(im.format), im.width, im.height, n)


def read_header(data: bytes, name: str, *, frames: int | None = None, budget: PixelBudget | None = None,
                verify: bool = False) -> Header:
    """The file's header, refused in one line over the budget, at another frame count than `frames`, or
    unreadable; with `verify`, a PNG's chunks are checksummed to IEND too (no pixel is inflated)."""
    budget = budget or PixelBudget.from_env()
    with _opened(data, name, budget) as im:
        header = _header(im, name, budget, frames)
        if verify and header.format == "PNG":
            im.verify()
    return header


def decode(data: bytes, name: str, *, frames: int | None = None, budget: PixelBudget | None = None,
           ) -> list[Image.Image]:
    """Every frame of the file as an RGB image (an animation's display time in ms in its `info`, as
    Pillow keeps it), refused before decoding as `read_header` refuses; a still image is one frame."""
    budget = budget or PixelBudget.from_env()
    out = []
    with _opened(data, name, budget) as im:
        header = _header(im, name, budget, frames)
        for k in range(header.frames):
            im.seek(k)
            if im.width * im.height > budget.image:  # a GIF frame may grow the canvas
                raise _over(name, f"frame {k + 1}: {im.width}x{im.height} pixels", budget.image, IMAGE_ENV,
                            "per image")
            out.append(im.convert("RGB"))
    return out


def check_files(paths: Iterable[Path], frames: int | None) -> int:
    """A run's preflight (module docstring) over `paths`, each file once; the files checked."""
    budget = PixelBudget.from_env()
    seen: set[Path] = set()
    for path in paths:
        if path in seen:
            continue
        seen.add(path)
        data = read_bytes(path, budget)
        header = read_header(data, str(path), frames=frames, budget=budget, verify=True)
        if header.format != "PNG" or header.frames > 1:
            # no cheap check reaches an animation's frame controls (Pillow reads each one as it
            # decodes the frame before it) nor other formats: decoded, then let go
            decode(data, str(path), frames=frames, budget=budget)
    return len(seen)


__all__ = ["CLIP_ENV", "DEFAULT_CLIP_PIXELS", "DEFAULT_IMAGE_PIXELS", "FORMATS", "IMAGE_ENV", "Header",
           "PixelBudget", "check_files", "decode", "read_bytes", "read_header"]
