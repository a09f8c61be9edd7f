"""`evprobe capture`: store the residual stream of benchmark prompts at named token positions.

    evprobe capture --model M --bench DIR --out ACTS [--requests select,answer_initial]
                    [--injection 0,1,2,3] [--layers all|0,4,8] [--positions last,image_mean,text_mean]
                    [--component resid_post|resid_pre|attn_out|mlp_out]
                    [--regime standard|guided|json] [--protocol direct|brief] [--limit N]
                    [--backend hf|vllm]   (vllm: inside a vLLM engine; engine.py)

Positions: the named spans, `token:I` (the I-th real token; -3 is the third from the end),
`frame:K` (the mean over the K-th image's feature tokens: on a clip benchmark, a frame) and
`marker:TEXT[:first|last|mean]` (the tokens of a substring of the prompt, e.g.
`marker:Question:last`); each is the name of its slot on the positions axis.

Files in ACTS:
- `acts.npy`: a real .npy file, float16, shape (items, layers, positions, d_model), created
  whole (header + sparse zeros) up front, then filled row by row. Row i is the i-th selected
  item (manifest order after `--requests` / `--injection` / `--limit`), so rows never move between
  sessions.
  Read it with `numpy.load(path, mmap_mode="r")`.
- `index.jsonl`: one line per captured item (its row, ids, pair ids, labels, token counts, and
  its information-injection level `injection` when not 0: a level-0 line is the line written
  before levels existed, and readers take a missing level as 0), in capture order (items are batched by image count), so read rows by the `row` field. It
  is the commit log: a batch's rows are written to acts.npy and fsync'ed BEFORE its index
  lines are appended (and fsync'ed), so every indexed row holds finished data; a row that is
  not indexed may hold zeros or a torn write and is recomputed on resume.
- `meta.json`: what the capture is (model, its file hashes (hooks.fingerprint), revision,
  requested and loaded dtype, layers, positions and their rules, regime, protocol, selection, the
  prompt template's and the benchmark's items hashes, chat-template and image hashes, library
  versions, and what exactly is stored), written atomically before the first item.

What is stored: raw decoder-layer outputs (hooks.capture): layer i == transformers'
`hidden_states[i + 1]` for i < n_layers - 1; the last layer is before the final norm.

Text marker of `text_mean`: the item's question sentence, i.e. the text after "Question: " to
the end of that line (select and answer requests, and the select variants); items without such
a line (read_ruler, recover_property) average over their whole prompt text.

Resumable: rerun the same command to continue after a kill; a rerun with different pinned
settings is refused. Rows are written with `os.pwrite` (not through a writable memmap, whose
written pages would stay resident and make memory grow with the number of items).

The subpackage: `config` (CaptureConfig, the layer and position specs, the index's fields),
`store` (acts.npy and index.jsonl: the rows, written and read), `job` (the job and the command),
`engine` (`--backend vllm`: the rows read inside a vLLM engine, its refusals and pins).
"""

from __future__ import annotations

from typing import Any

_PUBLIC = {
    "CAPTURE_META_FILE": "config", "FORMAT": "config", "STORED": "config", "TEXT_MARKER_RULE": "config",
    "QUESTION_PREFIX": "config", "INDEX_FIELDS": "config", "INDEX_OPTIONAL_FIELDS": "config",
    "CaptureConfig": "config", "stored_text": "config", "question_marker": "config", "parse_layers": "config",
    "check_layer_spec": "config", "check_positions": "config",
    "ACTS_FILE": "store", "INDEX_FILE": "store", "load_index": "store",
    "FLOAT16_MAX": "job", "CaptureJob": "job", "capture": "job", "add_capture_parser": "job", "run_capture": "job",
}


def __getattr__(name: str) -> Any:
    # Lazy: `evprobe capture --help` and the config's checks import no job, model or numpy side.
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{_PUBLIC[name]}"), name)


__all__ = sorted(_PUBLIC)
