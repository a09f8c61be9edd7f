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

The seed's own prompts, verbatim (appendix C; opt-in, for reproducing its tables): `seed002-standard`,
`seed002-guided` and `seed002-json` open the user turn with C.1's system prompt (and C.2's or C.3's
appended text), then the item's prompt and the protocol's text; nothing else is added (no guided line
of ours, no JSON suffix of ours). Two departures, both written here: the text opens the user turn
rather than a system turn (the same reason as above), and the extraction's typeset quotes are ASCII.
Its words are the seed's, including "a sequence of video frames" on a benchmark of sheets. A
`seed002-json` reply is read as a json reply (`is_json_regime`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from evprobe.bench.items import NUMERIC_REQUESTS, REQUESTS, Item


@dataclass(frozen=True)
class Protocol:
    name: str


PROTOCOLS: dict[str, Protocol] = {name: Protocol(name) for name in ("direct", "brief", "free")}
SEED002_STANDARD = (
    "You are a physical reasoning module deployed in a robotic system. You are analyzing a physics scenario from a "
    "sequence of video frames in chronological order. Your output directly informs real-time robot control "
    "decisions -- accuracy and efficiency are both critical.\n"
    "INSTRUCTIONS:\n"
    "- Focus on the physical events relevant to the question. Do NOT narrate every frame.\n"
    "- Do not repeat observations or think in circles.\n"
    "- State your analysis briefly, then provide your final answer."
)
SEED002_PROMPTS: dict[str, str] = {  # seed 002 appendix C.1-C.3, "reproduced verbatim as used during evaluation"
    "seed002-standard": SEED002_STANDARD,
    "seed002-guided": SEED002_STANDARD + "\n\nIf a question is unanswerable because there is insufficient evidence to "
                      "definitively provide an answer, don't provide a guess and respond \"I don't know\".",
    "seed002-json": SEED002_STANDARD + "\n\nYou MUST respond with a JSON object in this exact format:\n"
                    '{"reason": "<your step-by-step analysis>", "final_answer": "<your answer>"}\n'
                    "Do NOT include any text before or after the JSON.",
}
REGIMES: tuple[str, ...] = ("standard", "guided", "json", *SEED002_PROMPTS)
JSON_REGIMES = ("json", "seed002-json")  # replies read for a JSON final_answer (bench.parse)

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


def is_json_regime(regime: str) -> bool:
    """Whether a regime asks for a JSON object with a final_answer (its replies are read so)."""
    return regime in JSON_REGIMES


def check_regime(name: str) -> str:
    if name not in REGIMES:
        raise ValueError(f"unknown regime {name!r}; choose from {', '.join(REGIMES)}")
    return name


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
    if regime in SEED002_PROMPTS:  # the seed's system prompt opens the turn; nothing of ours is added
        return "\n\n".join([SEED002_PROMPTS[regime], *parts,
                             *([BRIEF_SUFFIX.format(slot=slot)] if protocol == "brief" and regime != "seed002-json" else [])])
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
