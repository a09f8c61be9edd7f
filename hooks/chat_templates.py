"""Minimal Jinja chat templates for the tiny models (hooks.tiny_models, hooks.tiny_text): each
architecture's role markers and image placeholder, and Qwen3's thinking switch."""

from __future__ import annotations


def chat_template(
    *,
    bos: str,
    user: str,
    user_end: str,
    assistant: str,
    assistant_end: str,
    image: str,
    system: str | None = None,
    video: str | None = None,
    thinking_switch: bool = False,
) -> str:
    """A minimal Jinja chat template.

    Renders each message as <role prefix> <content> <role suffix>; content is a
    string or a list of {"type": "image"} / {"type": "text", "text": ...} parts
    rendered in order (an image part becomes the placeholder the processor
    expands; with `video`, a {"type": "video"} part becomes that placeholder).
    `add_generation_prompt` appends the assistant prefix. With `thinking_switch`, Qwen3's switch:
    `enable_thinking=False` opens the reply with an empty reasoning block (THINK_OFF), and the
    template's default (the variable undefined) is thinking.
    """
    system = user if system is None else system
    # Jinja string literals: escape backslashes/quotes, keep newlines as \n escapes.
    q = lambda s: "'" + s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return (
        "{{ " + q(bos) + " }}"
        "{% for m in messages %}"
        "{% if m['role'] == 'assistant' %}{{ " + q(assistant) + " }}"
        "{% elif m['role'] == 'system' %}{{ " + q(system) + " }}"
        "{% else %}{{ " + q(user) + " }}{% endif %}"
        "{% if m['content'] is string %}{{ m['content'] }}"
        "{% else %}{% for c in m['content'] %}"
        "{% if c['type'] == 'image' %}{{ " + q(image) + " }}"
        + ("" if video is None else "{% elif c['type'] == 'video' %}{{ " + q(video) + " }}")
        + "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        "{% if m['role'] == 'assistant' %}{{ " + q(assistant_end) + " }}"
        "{% else %}{{ " + q(user_end) + " }}{% endif %}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ " + q(assistant) + " }}"
        + ("{% if enable_thinking is defined and enable_thinking is false %}{{ " + q(THINK_OFF) + " }}{% endif %}"
           if thinking_switch else "")
        + "{% endif %}"
    )


THINK_OFF = "<think>\n\n</think>\n\n"  # what Qwen3's templates write when thinking is switched off
