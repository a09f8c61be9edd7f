"""Loading an item's images (evprobe.bench.manifest.load_item_images): RGB copies with their file's
digest, decoding cached on it."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from evprobe.bench.manifest import SOURCE_INFO, load_item_images


def _png(path: Path, colour: tuple[int, int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)


def test_images_carry_their_digest_and_are_independent_copies(tmp_path: Path) -> None:
    _png(tmp_path / "images" / "a.png", (255, 0, 0))
    _png(tmp_path / "images" / "b.png", (0, 0, 255))
    first, other = load_item_images(tmp_path, ["images/a.png", "images/b.png"])
    assert first.mode == "RGB" and first.getpixel((0, 0)) == (255, 0, 0) and other.getpixel((0, 0)) == (0, 0, 255)
    assert len(first.info[SOURCE_INFO]) == 32 and first.info[SOURCE_INFO] != other.info[SOURCE_INFO]
    first.putpixel((0, 0), (0, 255, 0))  # a caller edits its image: the next caller's is untouched
    (again,) = load_item_images(tmp_path, ["images/a.png"])
    assert again.getpixel((0, 0)) == (255, 0, 0) and again is not first
    assert again.info[SOURCE_INFO] == first.info[SOURCE_INFO]


def test_a_rewritten_file_is_decoded_again(tmp_path: Path) -> None:
    _png(tmp_path / "images" / "a.png", (255, 0, 0))
    (before,) = load_item_images(tmp_path, ["images/a.png"])
    _png(tmp_path / "images" / "a.png", (0, 255, 0))  # same path, same size, new bytes
    (after,) = load_item_images(tmp_path, ["images/a.png"])
    assert after.getpixel((0, 0)) == (0, 255, 0) and after.info[SOURCE_INFO] != before.info[SOURCE_INFO]
