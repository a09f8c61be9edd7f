"""Response protocols and prompt regimes: the text added to an item's prompt before a model call.

Protocols (seed 000, section 4 and B.2): `direct` asks for the option code within 16 new tokens;
`brief` appends the seed's reasoning request (at most two short sentences, then a final
`ANSWER: <option>` line) and allows 256 tokens. `free` (seed 002, section 4.2: free-form replies)
asks the answer requests only, with no option letters: the menu and its instruction are replaced by
`FREE_QUESTION`, so abstaining is the model's own idea, and the reply is read by its words alone
(`bench.parse.parse_reply(..., letters=False)`: "yes", "no", "cannot be determined", "the evidence
does not settle it", ...) with seed 002's rubric (appendix D.2, `bench.parse.FREE_RUBRIC`, pinned in
run.json as `rubric`): a hedged reply that commits to one answer is that answer, "neither", "none
of the above", "not applicable" abstain; negated, conflicting or alternative words are invalid,
kept in every denominator; 96 tokens. Each protocol's budget is the model config's
(`max_new_tokens_<protocol>`, these numbers by default) unless a run sets its own (`bench.budgets`).

Regimes (seed 002, appendix C, adapted to this benchmark): `standard` adds nothing; `guided`
tells the model not to guess when the evidence is insufficient; `json` asks for a JSON object with
`reason` and `final_answer`. The seed used system prompts; we append the regime text to the user
turn instead, because several supported chat templates have no system role.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from evprobe.bench.items import NUMERIC_REQUESTS, REQUESTS, Item


@dataclass(frozen=True)
class Protocol:
    name: str


PROTOCOLS: dict[str, Protocol] = {name: Protocol(name) for name in ("direct", "brief", "free")}
REGIMES: tuple[str, ...] = ("standard", "guided", "json")

BRIEF_SUFFIX = (
    "Give at most two short sentences of working. You must then end your reply with this exact "
    "final line and nothing after it:\nANSWER: {slot}"
)
GUIDED = {
    "select": (
        "If the evidence is not enough to answer the question with certainty, do not stop and "
        "guess: choose a measurement."
    ),
    "answer": (
        "If the evidence is not enough to determine the answer, do not guess: choose the "
        "undetermined option."
    ),
}
JSON_SUFFIX = (
    "You MUST respond with a JSON object in this exact format:\n"
    '{{"reason": "<your step-by-step analysis>", "final_answer": "{slot}"}}\n'
    "Do NOT include any text before or after the JSON."
)
ANSWER_REQUESTS = ("answer_initial", "answer_after_test", "both_given")
MENU_OPENING = "What is the answer to the question, given the evidence?"  # bench.prompts' answer menu
FREE_QUESTION = "What is the answer to the question, given the evidence? Reply in one or two sentences."
GUIDED_FREE = "If the evidence is not enough to determine the answer, do not guess: say so."
NUMBER_REQUESTS = ("read_ruler", *NUMERIC_REQUESTS)  # replies are numbers: slot "<number>"


def get_protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; choose from {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def check_regime(name: str) -> str:
    if name not in REGIMES:
        raise ValueError(f"unknown regime {name!r}; choose from {', '.join(REGIMES)}")
    return name


def max_new_tokens(protocol: str, regime: str) -> int:
    """A protocol's default reply budget under a regime: a model config's defaults (a run's own,
    from its model config and flags: `bench.budgets.reply_budget`)."""
    from evprobe.bench.budgets import reply_budget
    from evprobe.bench.model_config import ModelConfig

    get_protocol(protocol)
    return reply_budget(ModelConfig("defaults", "defaults"), protocol, regime)


def free_prompt(item: Item) -> str:
    """An answer request's prompt with its option menu and instruction replaced by FREE_QUESTION."""
    from evprobe.bench.prompts import ANSWER_INSTRUCTION

    if item.request not in ANSWER_REQUESTS:
        raise ValueError(f"the free protocol asks answer requests only ({', '.join(ANSWER_REQUESTS)}); "
                         f"{item.item_id} is a {item.variant or item.request} item")
    parts = item.prompt.split("\n\n")
    if len(parts) < 3 or parts[-1] != ANSWER_INSTRUCTION or not parts[-2].startswith(MENU_OPENING + "\n"):
        raise ValueError(f"{item.item_id}: its prompt does not end with the answer menu and its instruction")
    return "\n\n".join([*parts[:-2], FREE_QUESTION])


def build_prompt(item: Item, protocol: str, regime: str = "standard") -> str:
    """The full user text for one call: the item's prompt, the regime's text, the protocol's."""
    get_protocol(protocol)
    check_regime(regime)
    slot = "<number>" if item.request in NUMBER_REQUESTS else "<option letter>"
    parts = [item.prompt]
    if protocol == "free":
        parts, slot = [free_prompt(item)], "<your answer in words>"
    if regime == "guided":
        if item.request == "select":
            parts.append(GUIDED["select"])
        elif item.request in ANSWER_REQUESTS:
            parts.append(GUIDED_FREE if protocol == "free" else GUIDED["answer"])
    if regime == "json":
        parts.append(JSON_SUFFIX.format(slot=slot))  # JSON replaces the ANSWER line
    elif protocol == "brief":
        parts.append(BRIEF_SUFFIX.format(slot=slot))
    return "\n\n".join(parts)


def prompt_template_sha256(protocol: str, regime: str) -> str:
    """sha256 of the text `build_prompt` puts around an item's own prompt, for every request type
    (the item's prompt stands as the placeholder "{prompt}"): the regime's and the protocol's text.
    With the benchmark's items hash, which fixes every item's own prompt, it fixes every rendered
    prompt. `build_prompt` reads an item's request and prompt only; should it read another field,
    this fails loudly (the stand-in has no other) rather than pin too little."""
    from types import SimpleNamespace

    if protocol == "free":  # answer requests only, their menu replaced: the stand-in carries one to replace
        from evprobe.bench.prompts import ANSWER_INSTRUCTION

        menu = f"{{prompt}}\n\n{MENU_OPENING}\n{{menu}}\n\n{ANSWER_INSTRUCTION}"
        stand_ins = [SimpleNamespace(request=r, prompt=menu, item_id=r, variant=None) for r in ANSWER_REQUESTS]
        parts = [f"{it.request}\n{build_prompt(it, protocol, regime)}" for it in stand_ins]  # type: ignore[arg-type]
        return hashlib.sha256("\n\0\n".join(parts).encode("utf-8")).hexdigest()
    stand_ins = [SimpleNamespace(request=request, prompt="{prompt}") for request in REQUESTS]
    parts = [f"{it.request}\n{build_prompt(it, protocol, regime)}" for it in stand_ins]  # type: ignore[arg-type]
    # The numeric estimates (an opt-in block) are wrapped exactly as read_ruler is, so read_ruler's
    # entry already pins their text and the hash of every run stays what it was before they
    # existed; should their wrapping ever differ, they enter the hash here.
    ruler = build_prompt(SimpleNamespace(request="read_ruler", prompt="{prompt}"), protocol, regime)  # type: ignore[arg-type]
    for request in NUMERIC_REQUESTS:
        text = build_prompt(SimpleNamespace(request=request, prompt="{prompt}"), protocol, regime)  # type: ignore[arg-type]
        if text != ruler:
            parts.append(f"{request}\n{text}")
    return hashlib.sha256("\n\0\n".join(parts).encode("utf-8")).hexdigest()
