"""The reply parser: one reading of a reply, or an honest `invalid` with the reason.

Where the reading comes from (seed 000, B.2, with its misreads fixed), after a thinking model's
`<think>...</think>` block, which is reasoning, not the reply (`bench.doubt` reads it; a reply cut off
inside the block is `invalid:unfinished_reasoning`):

1. json regime: the object's `final_answer`, when there is one (route `json`).
2. The last `ANSWER:` line (route `answer_line`). It is final: the working above it is never read
   (the seed scored "... D ... ANSWER: STOP" as the letter D), and when it holds no option the
   reply is `invalid:answer_line_unreadable` (json: `invalid:json_final_answer_unreadable`).
3. Otherwise the whole reply: route `direct` (a reply of at most 80 characters that starts with
   its option letter: "B", "(B)", "B. Perform the free-fall test"), `letter`, `name` (an action
   or answer name, or a candidate value of recover_property) or `number` (read_ruler).

The same rules read a final line, a `final_answer` and a whole reply. A reading is valid only when
it is unambiguous:

- Every option reference must point to the same option. References are standalone option letters
  (A-E between white space or bracket/quote/markdown punctuation, so "D-type" and a capital glued
  into garbled output are not letters, nor is a letter followed by "=", a variable as in
  "E = m g e^2 h"; a letter that is not on the item's menu counts as a reference to no option,
  so "yes or D" is invalid and "D" alone reads no option), action names ("stop", "answer now",
  "mass test", "free fall", "combined report", ...), answer names ("yes", "no", "undetermined",
  "cannot be determined", "I don't know", ...) and, for numeric requests, numbers (read_ruler: any
  number; recover_property: a number equal to one of the printed candidate values). "B stop" where
  B is free fall, "E then the mass test" where E is stop, and a truncated reply naming the mass
  test and the restitution test (the seed's second misread) are `invalid:conflicting_options`
  (read_ruler: `invalid:several_numbers`). A name that describes its own option is one reference:
  "combined report (mass test and friction test)" names the combined report only.
- Negation (`invalid:negated`): a cue governs the option references after it up to the end of
  its clause (a clause ends at . ! ? ; : , a dash or arrow, a new line, or "but", "so",
  "therefore", "hence", "thus", "because", "since", "although", "though", "however", "whereas",
  "while"), and the reference just before it when only a copula or modal stands between ("the mass
  test is not needed", "B would be wrong"). Cues: "not", "never", "cannot", any "n't" ("don't",
  "won't", ...), "no need to", "no point in", "instead of", "rather than", "without", "avoid",
  "skip", "neither", "nor", "wrong", "incorrect", "unnecessary", "redundant", "pointless",
  "useless", "wasteful", and, where "no" is not an option (every request but the answer
  requests), "no" and "none". A cue inside an option's own name does not count: "no" is an option
  of the answer requests, so "no" alone is valid and "not yes" is negated; "cannot be determined",
  "not enough evidence", "I don't know" and "the evidence does not settle the answer" are names of
  undetermined; "no further measurement" is a name of stop; "not sure" is a hedge.
- Alternatives (`invalid:alternatives`): "or", "/", "vs" or "versus" between references to two
  different options in one sentence ("A or B", "Either A or E", "A/B", "yes or no").
- Hedges (`invalid:hedged`): "maybe", "perhaps", "probably", "possibly", "likely", "might",
  "could be", "not sure", "unsure", "not certain", "I guess", "hard to say", "hard to tell", and
  "I think ... or" in one sentence. Only the text read counts, so hedged working above a clean
  `ANSWER:` line does not matter, but "ANSWER: probably C" is hedged.
- The article "A": a capital A is option A unless it is the indefinite article, which needs all
  of: (1) it opens a sentence (the start of the text read or of a line, or after . ! ?, markdown
  and quote marks aside), since mid-sentence the article is written "a"; (2) one space and then a
  lowercase word; (3) that word starts with a consonant sound, since before a vowel sound the
  article is "an" (a word starting a, e, i, o or u, except uni-, use-, usu-, uti-, one, once);
  (4) that word can start a noun phrase: not a function word, modal or copula (then, but, so,
  because, not, would, was, ... see `_NOT_AFTER_ARTICLE`) and not one of the bare option words
  "yes", "no", "stop", "now", which are an interjection or a verb in the menus, not nouns. So
  "A mass test is enough." and "A quick look says D" read the article; "A", "A.", "A, the mass
  test", "Option A", "A or B", "A is right", "A no" and "A stop" read option A.
- Numbers with units (read_ruler and the numeric estimates of `bench.numeric`, together
  `NUMBER_REQUESTS`): `bench.units` reads each number with the unit written after it and converts
  it to the unit the request asks for ("45 cm" is 0.45 m, "1200 g" is 1.2 kg; a bare number is in
  the asked unit). A number whose unit is of another kind is working, not a reference ("F = 3 N,
  so m = 1.2 kg" reads 1.2); when all numbers are of another kind the reply is
  `invalid:wrong_unit`; a comma between digits ("0,45", "1,200") is `invalid:ambiguous_comma`.
  Two numbers of one value ("0.45 m (45 cm)") are one reference. Estimates must be >= 0
  (`invalid:out_of_range`); 0 is a valid estimate (scored wrong), never a stand-in for a misread.
- Numbers (read_ruler, recover_property and the estimates) are tokens of the one grammar in
  `bench.units` (decimal, optional sign, exponent and unit, ASCII digits, a boundary after it). A
  token that starts like a number but is none ("0x1F", "12abc", "1.2.3", "1e", "--3", "٣", "½")
  is `invalid:malformed_number`: it is never read as the number it starts with.
  "inf", "infinity", "nan", "∞" and numbers that overflow a float ("1e999") are
  `invalid:non_finite`; nothing non-finite is ever stored.
  read_ruler values must lie in [0, RULER_MAX] metres or the reply is `invalid:out_of_range`.
  RULER_MAX is 1000 times the longest ruler the benchmark draws (`bench.calibration`: tracks and
  rulers of 0.5 to 2 m, so 2000): a reading of any of its rulers in millimetres still parses (and
  scores as a wrong reading), while no unit mix-up explains a larger number. Negative lengths are
  out of range. A sign counts only when attached and not preceded by a digit or letter ("0.4-0.5"
  is two numbers, "-0.45" is negative).

Two readings of hedges and evasive words (`rubric`, `Rubric`):

- "strict": the rules above. A hedge makes the reply `invalid:hedged`; "neither", "none", "none of
  the above", "not applicable" name no option ("Neither." is `invalid:no_option`, "Neither yes
  nor no." `invalid:negated`). Every letter protocol (direct, brief) reads this way, and so did the
  free protocol before the seed's rubric was built: a free run whose run.json has no `rubric` pin
  was read "strict" (its records keep that reading; `evprobe score` reads the records, never the
  replies again, so rescoring it gives what it gave).
- "seed002": seed 002's two-track rubric (appendix D.2), the free protocol's default reading
  (`FREE_RUBRIC`; letters=False), because the free protocol is seed 002's and its judges decide
  "abstained or answered" this way. (1) "If the model hedges but still commits to an answer ...
  that counts as PROVIDED AN ANSWER": a hedge (the words above) with exactly one option read, no
  alternative, conflict or negation, is that option ("I'm not sure, but it appears to be yes."
  is yes, "Probably yes." is yes, "Maybe it cannot be determined." is undetermined). "I think ...
  or" offers an alternative and stays `invalid:hedged`. (2) "if the model says 'neither' or
  'none' on a binary question, that is ABSTAINED", and the evasive non-answers "neither", "none
  of the above", "I don't know", "cannot tell", "not applicable": on the answer requests (yes/no
  questions with an undetermined option) they are names of undetermined (`_parse_spans._EVASIVE`):
  "neither" and "none" where they stand as the answer (before a clause end: "Neither.", "None,
  since ..."; or naming the options: "neither one", "neither answer", "neither yes nor no", "none
  of the above", "none of them"), "not applicable", "n/a", "not answerable", "unanswerable",
  "cannot be answered" and refusals ("I cannot answer", "I won't answer"). "I don't know" and
  "cannot tell" are undetermined under both readings. "Neither the mass nor the friction is
  known, so no." stays "no": there "neither" negates no option. On every other request (select,
  the numeric ones) nothing has an undetermined meaning to map these words to, so they read as
  under "strict" (a negation cue, or no option: invalid); only the hedge rule changes there.
- Under both, conflicting answers ("yes, no wait, no"), negated ones ("not yes") and alternatives
  ("yes or no") are invalid, and so is a reply that names no option: a bare hedge ("I'm not
  sure.", "Probably not.") or an answer in other words ("it appears to slide farther") is
  `invalid:no_option`; the LLM panel (`bench.judges`) reads those. Invalid stays in every
  denominator, never picked for. A free run's run.json pins the reading (`"rubric": "seed002"`;
  a letter run's has no such key, so its run.json is what it was), so resuming a free run read
  "strict" (no pin) or merging its shards with newer ones is refused in one line, never mixed.

When several problems occur, the reason reported is the first of: non_finite, ambiguous_comma,
malformed_number, negated, alternatives, conflicting_options (several_numbers), hedged,
out_of_range. A reply with no option reference at all is `invalid:no_option` (read_ruler:
`invalid:no_number`), even when hedged.
Invalid replies are returned as such, never replaced by a guess; they stay in every denominator.

Every reading takes time linear in the reply (tests/bench/test_parse_linear.py times 100 KB
adversarial replies): no pattern applied to a reply has two quantifiers over the same characters
(the ANSWER line, "I think ... or" and the sentence start before an article are found by scanning),
and the look-ups per cue, "or" and letter go through bisection or a character map, not a rescan.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Literal

from evprobe.bench.calibration import (
    COAST_TRACK,
    FALL_RULER,
    MASS_TRACK,
    REBOUND_RULER,
    SPRING_RULER,
)
from evprobe.bench.items import Item
from evprobe.bench.protocols import is_json_regime
from evprobe.bench._parse_spans import (
    ANSWERS,
    NUMBER_REQUESTS,
    Span,
    alternatives,
    find_spans,
    negated,
    ref_key,
    think_or,
)

LONGEST_RULER = max(MASS_TRACK, COAST_TRACK, REBOUND_RULER, SPRING_RULER, FALL_RULER)  # m
RULER_MAX = 1000.0 * LONGEST_RULER  # m; see the module docstring
DIRECT_MAX_CHARS = 80  # a longer reply that starts with a letter is read, but routed `letter`
Rubric = Literal["seed002", "strict"]  # how hedges and evasive words are read (module docstring)
RUBRICS: tuple[Rubric, ...] = ("seed002", "strict")
FREE_RUBRIC: Rubric = "seed002"  # the free protocol's reading (letters=False), pinned in its run.json

# An ANSWER line is what `^\s*[*_#>\s]*answer\s*[*_]*\s*[:：]\s*(.*?)\s*$` (re.I | re.M) finds with
# findall. That pattern is cubic on blank lines (three quantifiers over the same white space), so
# `_answer_line` finds the same matches with these pieces, reading each character a bounded number
# of times.
_ANSWER_WORD = re.compile("answer", re.I)
_ANSWER_LEAD = re.compile(r"[*_#>\s]*+")  # markup and white space before "answer", from a line start
_ANSWER_COLON = re.compile(r"\s*+[*_]*+\s*+[:：]")  # the classes alternate, so possessive is exact
_WHITE = re.compile(r"\s*+")
@dataclass(frozen=True)
class Parsed:
    valid: bool
    route: str  # json | answer_line | direct | letter | name | number, or invalid:<reason>
    choice: str | None = None
    action: str | None = None
    answer: str | None = None
    value: float | None = None


def invalid(reason: str) -> Parsed:
    return Parsed(False, f"invalid:{reason}")


@dataclass(frozen=True)
class _Reading:
    key: str
    value: float | None
    refs: tuple[Span, ...]


def _read(item: Item, text: str, letters: bool = True, rubric: Rubric = "strict") -> _Reading | str:
    """The one option `text` points to, or the reason why there is none."""
    text = text.replace("’", "'").replace("‘", "'").replace("−", "-")  # same length: spans hold
    ruler = item.request in NUMBER_REQUESTS
    spans, misread = find_spans(item, text, letters, evasive=rubric == "seed002")
    refs = [s for s in spans if s.kind in ("letter", "name", "number")]
    if misread in ("non_finite", "ambiguous_comma", "malformed_number"):
        return misread
    if not refs or all(r.key.startswith("?") for r in refs):
        return misread or ("no_number" if ruler else "no_option")
    if negated(text, spans):
        return "negated"
    if alternatives(text, refs):
        return "alternatives"
    if len({ref_key(r) for r in refs}) > 1:
        return "several_numbers" if ruler else "conflicting_options"
    # seed002: a hedge that still commits to one answer is that answer; "I think ... or" offers
    # an alternative, so it is hedged under both readings
    if rubric == "strict" and any(s.kind == "hedge" for s in spans) or think_or(text):
        return "hedged"
    first = refs[0]
    if ruler:
        assert first.value is not None
        upper = RULER_MAX if item.request == "read_ruler" else math.inf
        if not 0.0 <= first.value <= upper:
            return "out_of_range"
        return _Reading("", first.value or 0.0, tuple(refs))  # -0.0 is read as 0.0
    return _Reading(first.key, None, tuple(refs))


def _parsed(item: Item, reading: _Reading, route: str) -> Parsed:
    if item.request in NUMBER_REQUESTS:
        return Parsed(True, route, value=reading.value)
    letter = reading.key
    value = item.options[letter]  # type: ignore[index]
    if item.request == "select":
        return Parsed(True, route, choice=letter, action=value)
    if value in ANSWERS:
        return Parsed(True, route, choice=letter, answer=value)
    return Parsed(True, route, choice=letter, value=float(value))


def _final(item: Item, token: str, route: str, unreadable: str, letters: bool, rubric: Rubric) -> Parsed:
    """Read a final answer (an ANSWER line or a json `final_answer`): no fallback to the working."""
    got = _read(item, token, letters, rubric)
    if isinstance(got, str):
        return invalid(unreadable if got in ("no_option", "no_number") else got)
    return _parsed(item, got, route)


def _answer_line(text: str) -> str | None:
    """The last ANSWER line's answer (the last group `findall` gives for the pattern described at
    `_ANSWER_WORD`), or None. Linear: each "answer" is looked at once, its line's start found from
    the previous one, and a line's leading markup scanned once."""
    last: str | None = None
    done = 0  # end of the previous match: findall's matches do not overlap
    line_start, prev = 0, 0  # the line start of the previous "answer", and where it stood
    lead = (-1, -1)  # (line start, end of its leading markup), for the line of the last "answer" seen
    for m in _ANSWER_WORD.finditer(text):
        k = m.start()
        nl = text.rfind("\n", prev, k)
        line_start, prev = (nl + 1 if nl != -1 else line_start), k
        if k < done or line_start < done:
            continue  # inside the previous match, or its line began there: no `^` left to match
        if lead[0] != line_start:
            lead = (line_start, _ANSWER_LEAD.match(text, line_start).end())  # type: ignore[union-attr]
        if lead[1] != k:
            continue  # something other than markup stands between the line start and "answer"
        colon = _ANSWER_COLON.match(text, m.end())
        if not colon:
            continue
        start = _WHITE.match(text, colon.end()).end()  # type: ignore[union-attr]
        eol = text.find("\n", start)
        eol = len(text) if eol == -1 else eol
        last = text[start:eol].rstrip()  # `(.*?)\s*$`: the rest of the line less trailing white space
        stop = start + len(last)
        white = _WHITE.match(text, stop).end()  # type: ignore[union-attr]
        # the final `\s*$` takes the white space after the answer up to its last line end
        done = len(text) if white == len(text) else text.rfind("\n", stop, white)
    return last


def reading_of(letters: bool, rubric: Rubric | None = None) -> Rubric:
    """The rubric `parse_reply` reads with: `rubric`, else `FREE_RUBRIC` for the free protocol's
    replies (letters=False) and "strict" for the letter protocols'."""
    if rubric is None:
        return "strict" if letters else FREE_RUBRIC
    if rubric not in RUBRICS:
        raise ValueError(f"unknown rubric {rubric!r}; choose from {', '.join(RUBRICS)}")
    return rubric


def parse_reply(item: Item, reply: str, regime: str = "standard", *, letters: bool = True,
                rubric: Rubric | None = None) -> Parsed:
    """Read one reply to `item`; see the module docstring for the order and the rules. `letters=False`
    (the free protocol, whose prompts show no option letters): only names count, never a letter.
    `rubric` (`reading_of`): "seed002" reads a hedged commitment as its answer and seed 002's
    evasive non-answers as undetermined; "strict" reads both invalid (every run before it existed)."""
    rubric = reading_of(letters, rubric)
    text = reply.strip()
    lowered = text.lower()
    if "</think>" in lowered:  # a thinking model's reasoning block: the reply is what follows it (bench.doubt)
        text = text[lowered.rfind("</think>") + len("</think>"):].strip()
    elif "<think>" in lowered:
        return invalid("unfinished_reasoning")  # cut off inside its reasoning: no reply was given
    if not text:
        return invalid("empty")
    if is_json_regime(regime):
        # `\{.*\}` (re.S): from the first "{" to the last "}" (a rescan from each "{" is quadratic)
        first, last = text.find("{"), text.rfind("}")
        if first != -1 and last > first:
            try:
                obj = json.loads(text[first : last + 1])
            except (ValueError, RecursionError):  # bad JSON, an integer too long for int(), nesting too deep
                obj = None
            if isinstance(obj, dict) and "final_answer" in obj:
                return _final(item, str(obj["final_answer"]), "json", "json_final_answer_unreadable", letters,
                              rubric)
    line = _answer_line(text)
    if line is not None:
        return _final(item, line, "answer_line", "answer_line_unreadable", letters, rubric)
    got = _read(item, text, letters, rubric)
    if isinstance(got, str):
        return invalid(got)
    if item.request in NUMBER_REQUESTS:
        return _parsed(item, got, "number")
    first = got.refs[0]
    opening = re.match(r"[\s*_(\[\"'“]*", text)
    if first.kind == "letter" and len(text) <= DIRECT_MAX_CHARS and opening and first.start == opening.end():
        return _parsed(item, got, "direct")
    route = "letter" if any(r.kind == "letter" for r in got.refs) else "name"
    return _parsed(item, got, route)
