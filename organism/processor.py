"""`OrganismProcessor`: what `hooks` calls the organism's processor.

It has the processor interface the toolkit uses (`apply_chat_template`, `__call__(text=...,
images=...)`, `tokenizer`, `save_pretrained` / `from_pretrained`), so the organism runs through
the same handle, runner, capture, steering and patching code as any VLM. The chat template is
trivial (image placeholders, the prompt, then the generation prompt `REPLY`); `__call__` turns each
rendered row into facts (`organism.reader`) and those into token ids, left-padded; whatever follows
`REPLY` (the reply so far, e.g. the answer prefix `ANSWER:` that readouts teacher-force) is split
on spaces into tokens after the facts. Clips marked as videos (`--video-input native`) take the video
path (`video_processor`, `video_token`): each video one clip, read as the sheet its panel frames make,
so a clip read as a video gives the facts it gives as frames.

`answer_prefix = "ANSWER:"`: the organism replies `ANSWER: <letter>`, so its letter is generated at
the second step; `hooks` reads the attribute into `Handle.answer_prefix`, and every readout of the
answer (log-probs, capture, patching) appends it.

Two attributes tell `hooks.spans` how to find positions in its rows:
- `image_feature_token_ids`: the `<seen_*:k>` and `<fine_*:f>` tokens, i.e. the readings of the
  sheets, two tokens per sheet (the organism's image positions, `vocab.reading_tokens`);
- `keeps_prompt_text = False`: the rows are facts, not the prompt's words, so text spans do
  not exist.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from evprobe.organism.checkpoint import PROCESSOR_CLASS
from evprobe.organism.vocab import ANSWER_PREFIX, FINE, N_BINS, SEEN, bin_start, token_ids

IMAGE_PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"
REPLY = "\n<reply>\n"  # the generation prompt: the prompt ends before it, the reply starts after it


def _placeholders(rendered: str) -> tuple[int, int, str]:
    """A rendered row's leading image placeholders, then video placeholders (one line each), and the
    rest of the row."""
    counts = []
    for placeholder in (IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER):
        line, n = placeholder + "\n", 0
        while rendered.startswith(line, len(line) * n):
            n += 1
        counts.append(n)
        rendered = rendered[len(line) * n:]
    return counts[0], counts[1], rendered


class ClipFrames:
    """The organism's video path (hooks.inputs.takes_videos): a video's frames reach the reader as they
    are, one clip each (organism.reader.clip_sheets)."""

    def __call__(self, videos: Sequence[Sequence], **_: object) -> list[list]:
        return [list(v) for v in videos]


class OrganismProcessor:
    keeps_prompt_text = False
    video_token = VIDEO_PLACEHOLDER
    answer_prefix = ANSWER_PREFIX
    prompt_format = "chat"  # it renders the chat turn itself (no transformers template to find)

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.image_feature_token_ids = frozenset(
            i for kind in SEEN + FINE for i in range(bin_start(kind), bin_start(kind) + N_BINS)
        )
        self.video_processor = ClipFrames()

    @classmethod
    def from_pretrained(cls, path: str | Path, **_: object) -> OrganismProcessor:
        from transformers import PreTrainedTokenizerFast

        return cls(PreTrainedTokenizerFast.from_pretrained(str(path)))

    def save_pretrained(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save_pretrained(path)
        (path / "processor_config.json").write_text(json.dumps({"processor_class": PROCESSOR_CLASS}) + "\n")

    def apply_chat_template(self, conversation: list[dict], add_generation_prompt: bool = True,
                            tokenize: bool = False, **_: object) -> str:
        """One user turn -> one placeholder per image, one per video, then the text (then REPLY)."""
        if tokenize:
            raise ValueError("OrganismProcessor.apply_chat_template renders text only (tokenize=False)")
        parts: list[str] = []
        for message in conversation:
            content = message["content"]
            if isinstance(content, str):
                parts.append(content)
                continue
            for chunk in content:
                parts.append({"image": IMAGE_PLACEHOLDER, "video": VIDEO_PLACEHOLDER}.get(chunk["type"])
                             or chunk["text"])
        return "\n".join(parts) + (REPLY if add_generation_prompt else "")

    def row_tokens(self, rendered: str, images: Sequence, videos: Sequence[Sequence] = ()) -> list[str]:
        """The token strings of one rendered row (its images, then its videos, each a list of frames)."""
        from evprobe.organism.reader import read_facts

        n_images, n_videos, body = _placeholders(rendered)
        for n, given, what in ((n_images, images, "image"), (n_videos, videos, "video")):
            if n != len(given):
                raise ValueError(f"row has {n} {what} placeholders but {len(given)} {what}s")
        prompt, sep, reply = body.rpartition(REPLY)
        if not sep:  # rendered without a generation prompt
            prompt, reply = body, ""
        facts = read_facts(prompt, images, videos=videos)
        known = token_ids()  # cached; the tokenizer's get_vocab() builds a new dict per call (1.5 ms)
        return (["<bos>", "task"] if facts is None else facts.tokens()) + [
            w if w in known else "<unk>" for w in reply.split()]

    def __call__(self, text: str | Sequence[str], images: Sequence[Sequence] | None = None,
                 padding: bool = True, padding_side: str = "left", return_tensors: str | None = "pt",
                 videos: Sequence[Sequence] | None = None, **_: object):
        """Rows of token ids, left-padded. videos: every row's videos in text order (as a stock
        processor takes them: each row takes as many as its turn has video placeholders)."""
        import torch
        from transformers import BatchFeature

        texts = [text] if isinstance(text, str) else list(text)
        rows_images = list(images) if images is not None else [[] for _ in texts]
        if len(rows_images) != len(texts):
            raise ValueError(f"{len(texts)} rows but {len(rows_images)} image lists")
        queue = self.video_processor(videos or [])
        counts = [_placeholders(t)[1] for t in texts]
        if sum(counts) != len(queue):
            raise ValueError(f"the rows have {sum(counts)} video placeholders but {len(queue)} videos were given")
        starts = [sum(counts[:r]) for r in range(len(texts))]
        vocab = token_ids()  # the tokenizer's vocabulary, cached (as in row_tokens)
        rows = [[vocab[tok] for tok in self.row_tokens(t, list(imgs), queue[s:s + c])]
                for t, imgs, s, c in zip(texts, rows_images, starts, counts)]
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        if padding_side == "left":
            ids = [[pad] * (width - len(r)) + r for r in rows]
            mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
        else:
            ids = [r + [pad] * (width - len(r)) for r in rows]
            mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
        data = {"input_ids": ids, "attention_mask": mask}
        if return_tensors == "pt":
            data = {k: torch.tensor(v) for k, v in data.items()}
        return BatchFeature(data=data)

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)
