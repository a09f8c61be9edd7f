"""A benchmark folder's layout: its file names and the format version bench.json records.

    DIR/families.jsonl   one line per family          DIR/items.jsonl   one line per request
    DIR/bench.json       configuration, counts, hashes DIR/images/      the rendered sheets

Kept apart from the readers (`bench.manifest`) and the schemas (`bench.schema`) so that both can
name them without importing each other.
"""

FAMILIES_FILE = "families.jsonl"
ITEMS_FILE = "items.jsonl"
META_FILE = "bench.json"
FORMAT_KEY = "format_version"  # in bench.json; absent in benchmarks written before it existed
FORMAT_VERSION = 1
