"""Benchmark: read the main set's items.jsonl (9,216 items) with and without the schema.

Prints, measured side by side in one process (best of --repeat rounds; each round runs every
reader once, in turn, so a load that comes and goes on a shared machine falls on all alike):
- before: the reading without a schema (json.loads per line, then Item.from_json), as before
  bench.schema existed, without and with its image-path check (its default then);
- read_items with the schema only (no hash, no image check), with bench.json's sha256 check, and
  with the image-path check as well (the default);
- read_families on the same folder;
and, once, what importing bench.schema adds to bench.manifest's imports (pydantic and the generated
models; paid once per process, on the first read), and a cold start: a fresh Python process that
imports bench.manifest and calls read_items once (what a command pays before its first item).

    python benchmarks/read_items.py [--bench FOLDER] [--repeat 5]

Without --bench the main set is generated into a temporary folder first (about 15 s, 1 worker).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


COLD = """
import sys, time
t = time.perf_counter()
from evprobe.bench.manifest import read_items
items = read_items(sys.argv[1])
print(f"cold start (fresh process: imports + first read_items): {time.perf_counter() - t:.3f} s ({len(items)} rows)")
"""


def best_of(repeat: int, readers: list[tuple[str, Callable[[], Any]]]) -> dict[str, tuple[float, int]]:
    """(best seconds, rows read) of each reader, over `repeat` rounds of all readers in turn."""
    best = {name: (float("inf"), 0) for name, _ in readers}
    for _ in range(repeat):
        for name, fn in readers:
            t = time.perf_counter()
            out = fn()
            best[name] = (min(best[name][0], time.perf_counter() - t), len(out))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=None, help="an existing main-set folder")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import evprobe.bench.manifest  # noqa: F401  (what reading needed before: numpy, the dataclasses)

    t = time.perf_counter()
    import evprobe.bench.schema  # noqa: F401  (added: pydantic, PIL for the style names, the models)

    schema_import = time.perf_counter() - t
    from evprobe.bench.generate import GenerateConfig, generate
    from evprobe.bench.items import Item
    from evprobe.bench.manifest import ITEMS_FILE, read_families, read_items, resolve_image

    tmp = None
    bench = args.bench
    if bench is None:
        tmp = Path(tempfile.mkdtemp(prefix="evprobe-read-"))
        bench = tmp / "main"
        generate(bench, GenerateConfig(), progress=False)
    try:
        def before() -> list[Item]:  # the reader before the schemas: json.loads per line, then from_json
            with (bench / ITEMS_FILE).open(encoding="utf-8") as fh:
                return [Item.from_json(json.loads(line)) for line in fh if line.strip()]

        def before_with_images() -> list[Item]:
            items, seen = before(), set()
            for it in items:
                for rel in it.images:
                    if rel not in seen:
                        resolve_image(bench, rel)
                        seen.add(rel)
            return items

        rows = [
            ("before: no schema (json.loads + Item.from_json)", before),
            ("before: no schema + image paths (its default)", before_with_images),
            ("read_items, schema only (verify_hash=False, validate_images=False)",
             lambda: read_items(bench, validate_images=False, verify_hash=False)),
            ("read_items, schema + sha256 (validate_images=False)", lambda: read_items(bench, validate_images=False)),
            ("read_items, schema + sha256 + image paths (default)", lambda: read_items(bench)),
            ("read_families, schema + sha256", lambda: read_families(bench)),
        ]
        size_mb = (bench / ITEMS_FILE).stat().st_size / 1e6
        print(f"{bench / ITEMS_FILE}: {size_mb:.1f} MB; best of {args.repeat}")
        print(f"import of bench.schema (once per process): {schema_import:.3f} s")
        results = best_of(args.repeat, rows)
        for name, (seconds, n) in results.items():
            print(f"{name}: {seconds:.3f} s ({n} rows)")
        old, new = results[rows[1][0]][0], results[rows[4][0]][0]
        print(f"default read_items, after / before: {new / old:.2f}x")
        cold = subprocess.run([sys.executable, "-c", COLD, str(bench)], check=True, capture_output=True, text=True)
        print(cold.stdout.strip())
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
