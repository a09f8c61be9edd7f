"""Reading and writing a benchmark folder: families.jsonl, items.jsonl, bench.json, images/.

Readers validate at the edge, against one typed schema per file (`bench.schema`, pydantic in
strict mode): a line that is not UTF-8 or not JSON, a missing or unknown field, a value of the
wrong type or outside its allowed values ("false" where true or false is expected), a repeated
item or family id, an empty file, an image path that leaves the folder or an image that is not
there, and a file whose sha256 differs from the one bench.json records, are each a one-line
`InputError` naming file, line and field, and the fix.

bench.json carries `format_version` (FORMAT_VERSION); a bench.json written before that key
existed is accepted when it is otherwise valid, and read as version 1.

Writers are atomic: a file appears whole under its final name or not at all.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from evprobe.bench.family import Family
from evprobe.bench.items import Item
from evprobe.core.errors import InputError
from evprobe.core.files import key_line
from evprobe.core.json_files import read_json_text

from evprobe.bench.layout import FAMILIES_FILE, FORMAT_KEY, FORMAT_VERSION, ITEMS_FILE, META_FILE
from evprobe.core.json_types import JsonObject

__all__ = ["FAMILIES_FILE", "FORMAT_KEY", "FORMAT_VERSION", "ITEMS_FILE", "META_FILE", "load_item_images",
           "read_families", "read_items", "read_meta", "resolve_image", "stale_manifests"]

REGENERATE = "regenerate the benchmark (evprobe generate)"
FIX_LINE = f"; {REGENERATE} or fix the line"
T = TypeVar("T")


def _not_utf8(path: Path, number: int, line: bytes) -> InputError | None:
    """The error for a line that is not UTF-8 text, naming its first bad byte; None if it is."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as err:
        return InputError(
            f"{path}:{number}: not UTF-8 text (byte 0x{line[err.start]:02x} at column {err.start + 1}){FIX_LINE}"
        )
    return None


def _rows(path: Path, what: str, cls: type[T], model: Any, problem: Callable[[Any], str | None],
          id_field: str) -> tuple[bytes, list[int], list[T]]:
    """The bytes of a JSONL manifest, and the line number and `cls` object of each non-blank line.

    Every line must be UTF-8 JSON that `model` accepts and `problem` finds nothing wrong with;
    `id_field` values must be unique, and the file must hold at least one row. Each row becomes
    its object at once (holding 9,216 validated rows until the end costs the garbage collector
    more than the validation)."""
    from pydantic import ValidationError

    from evprobe.bench.schema import describe, instance

    if not path.is_file():
        raise InputError(f"{path}: file not found; run `evprobe generate --out {path.parent}` first")
    data = path.read_bytes()
    seen: dict[str, int] = {}
    numbers: list[int] = []
    out: list[T] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line or line.isspace():
            continue
        try:
            row = model.model_validate_json(line)  # the JSON parser refuses bytes that are not UTF-8
        except ValidationError as err:
            raise _not_utf8(path, number, line) or InputError(f"{path}:{number}: {describe(err)}{FIX_LINE}") from None
        bad = problem(row)
        if bad:
            raise InputError(f"{path}:{number}: {bad}{FIX_LINE}")
        key = getattr(row, id_field)
        if key in seen:
            raise InputError(
                f"{path}:{number}: field {id_field!r} repeats {key!r} of line {seen[key]}; "
                f"{id_field} values must be unique{FIX_LINE}"
            )
        seen[key] = number
        numbers.append(number)
        out.append(instance(cls, row))
    if not out:
        raise InputError(f"{path}: holds no {what} (the file is empty); {REGENERATE}")
    return data, numbers, out


def read_meta(bench_dir: str | Path) -> JsonObject:
    """bench.json, validated (`bench.schema.BenchMeta`); the JSON object as written.

    A bench.json without `format_version` (written before the key existed) is accepted when it is
    otherwise valid; a newer format version is refused."""
    from pydantic import ValidationError

    from evprobe.bench.schema import BenchMeta, describe, meta_problem

    path = Path(bench_dir) / META_FILE
    if not path.is_file():
        raise InputError(f"{path}: file not found; run `evprobe generate --out {path.parent}` first")
    meta, text = read_json_text(path, REGENERATE)
    data = text.encode("utf-8")
    if not isinstance(meta, dict):
        raise InputError(f"{path}:1: expected a JSON object, got {type(meta).__name__}; {REGENERATE}")
    try:
        model = BenchMeta.model_validate_json(data)
    except ValidationError as err:
        loc = err.errors(include_url=False)[0]["loc"]
        key = loc[0] if loc else None
        fix = (f"upgrade evprobe to read it, or regenerate the benchmark with this one (evprobe generate "
               f"--force --out {path.parent})" if key == FORMAT_KEY else f"{REGENERATE} or fix the file")
        raise InputError(f"{path}:{key_line(text, key)}: {describe(err)}; {fix}") from None
    bad = meta_problem(model)
    if bad:
        key, message = bad
        raise InputError(f"{path}:{key_line(text, key)}: {message}; {REGENERATE} or fix the file")
    return meta


def _verify(path: Path, data: bytes, meta: JsonObject, key: str, count_key: str | None, count: int) -> None:
    """The file's bytes hash to bench.json's `key`, and it holds bench.json's `count_key` rows
    (when `count_key` is given)."""
    meta_path = path.parent / META_FILE
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta[key]:
        raise InputError(
            f"{path}: sha256 {digest[:12]}... differs from {key} {meta[key][:12]}... in {meta_path}: "
            f"the file changed after generation; regenerate the benchmark "
            f"(evprobe generate --force --out {path.parent}) or restore the file"
        )
    if count_key is not None and meta[count_key] != count:
        raise InputError(
            f"{meta_path}: {count_key} is {meta[count_key]} but {path.name} holds {count}; "
            f"regenerate the benchmark (evprobe generate --force --out {path.parent})"
        )


def stale_manifests(bench_dir: str | Path) -> list[str]:
    """For each manifest whose sha256 differs from the one bench.json records, the line
    `read_families` / `read_items` would raise (bench.json itself must be valid). For `evprobe
    check`, which reads the manifests with `verify_hash=False` so that it can compare every field,
    and reports these lines as a failed row instead."""
    meta = read_meta(bench_dir)
    out = []
    for name, key in ((FAMILIES_FILE, "families_sha256"), (ITEMS_FILE, "items_sha256")):
        path = Path(bench_dir) / name
        try:
            _verify(path, path.read_bytes(), meta, key, None, 0)
        except InputError as err:
            out.append(str(err))
    return out


def read_families(bench_dir: str | Path, *, verify_hash: bool = True) -> list[Family]:
    """Every family of a benchmark folder, each row checked against `bench.schema.FamilyRow`.

    With `verify_hash`, families.jsonl's sha256 and row count must be those bench.json records."""
    from evprobe.bench.schema import FamilyRow, family_problem

    meta = read_meta(bench_dir) if verify_hash else None
    path = Path(bench_dir) / FAMILIES_FILE
    data, _, families = _rows(path, "families", Family, FamilyRow, family_problem, "family_id")
    if meta is not None:
        _verify(path, data, meta, "families_sha256", "n_families", len(families))
    return families


def read_items(bench_dir: str | Path, *, validate_images: bool = True, verify_hash: bool = True) -> list[Item]:
    """Every item of a benchmark folder, each row checked against `bench.schema.ItemRow`.

    With `validate_images`, each image path must be a file inside the folder (see
    `resolve_image`); with `verify_hash`, items.jsonl's sha256 and item count must be those
    bench.json records (`evprobe check` reads without it: it compares every field itself)."""
    from evprobe.bench.schema import ItemRow, item_problem

    meta = read_meta(bench_dir) if verify_hash else None
    path = Path(bench_dir) / ITEMS_FILE
    data, numbers, items = _rows(path, "items", Item, ItemRow, item_problem, "item_id")
    if validate_images:
        root, seen = Path(bench_dir).resolve(), set()  # many items share an image: check each once
        for number, item in zip(numbers, items):
            for i, rel in enumerate(item.images):
                if rel not in seen:
                    _resolve_under(root, rel, f"{path}:{number}: field 'images[{i}]'")
                    seen.add(rel)
    if meta is not None:
        _verify(path, data, meta, "items_sha256", "n_items", len(items))
    return items


def resolve_image(bench_dir: str | Path, rel: str, *, where: str = "") -> Path:
    """The real path of an image named in a manifest, refusing any path that leaves the folder.

    Rejected: absolute paths, `..` components, and links whose target lies outside the folder.
    """
    return _resolve_under(Path(bench_dir).resolve(), rel, where)


def _resolve_under(root: Path, rel: str, where: str) -> Path:
    """`resolve_image` under the already resolved folder `root`."""
    prefix = f"{where}: " if where else ""
    if not isinstance(rel, str) or not rel:
        raise InputError(f"{prefix}image path {rel!r} is not a non-empty string")
    candidate = Path(rel)
    if candidate.is_absolute() or rel.startswith(("/", "\\")):
        raise InputError(f"{prefix}image path {rel!r} is absolute; paths must be relative to {root}")
    if ".." in candidate.parts:
        raise InputError(f"{prefix}image path {rel!r} escapes the benchmark folder with '..'")
    full = (root / candidate).resolve()
    if root not in full.parents:
        raise InputError(f"{prefix}image path {rel!r} resolves to {full}, outside {root}")
    if not full.is_file():
        raise InputError(f"{prefix}image {rel!r} not found under {root}; regenerate the benchmark")
    return full


def load_item_images(bench_dir: str | Path, rels: Iterable[str], *, clips_as_video: bool = False) -> list[Any]:
    """The RGB PIL images of an item's `images` paths (each checked by `resolve_image`). Each
    image's `info` carries SOURCE_INFO: the blake2b-128 digest of its file's bytes, which readers
    that cache per sheet (the organism's eye) key on (the bytes, not a path or mtime: a rewritten
    file is a new key however soon it is rewritten).

    Decoding is cached on that digest too (the last `_DECODED_SIZE` sheets): the main set's 9,216
    items show 864 sheets, items of a family come together, and PNG decoding was 55 of the
    organism's 88 s run. Every call returns its own copies, so a caller that edits an image
    changes no other caller's.

    A clip (an animated PNG, `bench.clips`) gives its frames in order, each an image: every model
    reads a clip as frames (the seed's "frames as images"). A frame's SOURCE_INFO is the file's
    digest with ":<frame number>" appended. With `clips_as_video`, a clip's frames are marked as one
    video (`load_images`)."""
    return load_images((resolve_image(bench_dir, rel) for rel in rels), clips_as_video=clips_as_video)


def check_item_images(bench: str | Path, items: Iterable[Any], meta: JsonObject) -> int:
    """The preflight of a job that reads `items`' images (`evprobe run`, `evprobe capture`), before a model
    loads or a request is sent: each image file once, within the pixel budget, at the benchmark's frame
    count (1 for sheets, bench.json's `evidence` for clips) and whole (`bench.decode.check_files`); the
    files checked."""
    from evprobe.bench.clips import benchmark_clip
    from evprobe.bench.decode import check_files

    clip = benchmark_clip(meta)
    rels = dict.fromkeys(rel for it in items for rel in it.images)  # many items share an image
    return check_files((resolve_image(bench, rel) for rel in rels), 1 if clip is None else clip.frames)


def load_images(paths: Iterable[Path], *, clips_as_video: bool = False) -> list[Any]:
    """`load_item_images` on paths already resolved (a backend's `ModelPrompt.images`). With
    `clips_as_video`, each clip's frames are marked as one video (`core.video.mark_video`, keyed by
    the file's place and digest, at the clip's rate), for a model that reads video."""
    from evprobe.bench.clips import read_frames
    from evprobe.bench.decode import read_bytes

    out = []
    for place, path in enumerate(paths):
        data = read_bytes(Path(path))
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
        frames = _DECODED.get(digest)
        if frames is None:
            frames = read_frames(data, name=str(path))  # a still image is one frame; within the pixel budget
            for k, rgb in enumerate(frames, 1):
                rgb.info[SOURCE_INFO] = digest if len(frames) == 1 else f"{digest}:{k}"
            _DECODED[digest] = frames
            while sum(_pixels(v) for v in _DECODED.values()) > _DECODED_SIZE * _SHEET_PIXELS and len(_DECODED) > 1:
                _DECODED.popitem(last=False)
        else:
            _DECODED.move_to_end(digest)
        copies = [rgb.copy() for rgb in frames]  # copy() keeps info, so the digest travels with it
        if clips_as_video and len(copies) > 1:
            from evprobe.core.video import mark_video

            # keyed by place too: the same clip shown twice in a row (a test repeated) is two videos;
            # its rate from a frame's display time (ms)
            mark_video(copies, f"{place}:{digest}", 1000.0 / float(copies[0].info.get("duration") or 1000.0))
        out += copies
    return out


def _pixels(frames: list[Any]) -> int:
    return sum(f.width * f.height for f in frames)


_SHEET_PIXELS = 672 * 672
_DECODED_SIZE = 48  # in sheets' worth of pixels (672 x 672 RGB): about 65 MB; a 32-frame clip counts 8
_DECODED: OrderedDict[str, list[Any]] = OrderedDict()  # least recently used first


SOURCE_INFO = "evprobe_source"  # key in PIL's Image.info: the digest of the file's bytes
