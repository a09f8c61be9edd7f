"""Secrets kept off disk: an API key and a URL's credentials replaced by *** wherever a server's
words are kept (records, the http cache, errors, warnings) and in every URL shown (run.json, messages).

A careless or hostile server may echo a secret in any encoding, so `Redactor` replaces each secret
raw, as Python's repr writes it, JSON-escaped (nested up to three deep, ASCII-escaped, `\\/`, `\\u00XX`), URL-encoded (quote and
quote_plus, either case of hex) and base64 (standard and URL-safe, padded or not, and at each of
the three alignments a secret can have inside a longer base64 text, e.g. `Basic base64(user:password)`).
Standard library only: the judge and the runner use it without httpx.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit, urlunsplit

from evprobe.core.errors import InputError

MASK = "***"
# Query parameters that carry a credential (`?api_key=...`, `?sig=...`): their values are secrets too.
_SECRET_PARAM = re.compile(r"key|token|secret|passw|sig|auth|cred", re.IGNORECASE)
_B64_MIN = 6  # shortest base64 form replaced (shorter ones would match ordinary words)


def _json_forms(secret: str) -> set[str]:
    """`secret` inside a JSON string, nested up to three deep (a JSON text quoted in a JSON error
    message, quoted again), ASCII-escaped or not, with `/` escaped or not, and with every character
    that is not a letter or digit as a \\u00XX escape (either case), as some encoders write."""
    out = set()
    for start in (secret, secret.replace("/", "\\/")):
        for ascii_only in (False, True):
            text = start
            for _ in range(3):
                text = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
                out |= {text, text.replace("/", "\\/")}
    for case in (str.lower, str.upper):
        out.add("".join(c if c.isalnum() and c.isascii() else _u_escape(c, case) for c in secret))
    return out


def _u_escape(c: str, case: Any) -> str:
    """`c` as JSON's \\uXXXX escape (a surrogate pair beyond the BMP), hex digits in `case`."""
    units = c.encode("utf-16-be")
    return "".join("\\u" + case(units[i : i + 2].hex()) for i in range(0, len(units), 2))


def _url_forms(secret: str) -> set[str]:
    """`secret` percent-encoded as quote and quote_plus write it (all reserved characters, or all
    but `/`), with either case of hex digits."""
    out = set()
    for text in (quote(secret, safe=""), quote(secret), quote_plus(secret, safe=""), quote_plus(secret)):
        out |= {text, re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)}
    return out


def _base64_forms(secret: bytes) -> set[str]:
    """The base64 text of `secret` alone, and the part of a longer base64 text that encodes only its
    bytes at each alignment (the characters shared with a neighbouring byte left out)."""
    out: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(secret).decode("ascii")
        out |= {f for f in (whole, whole.rstrip("=")) if len(f) >= _B64_MIN}
        for offset in (0, 1, 2):
            text = encode(b"\0" * offset + secret).decode("ascii")
            core = text[-(-8 * offset // 6):(offset + len(secret)) * 8 // 6]
            if len(core) >= _B64_MIN:
                out.add(core)
    return out


@dataclass(frozen=True)
class Redactor:
    """Replaces each secret, in every encoding above, by ***; `Redactor(())` changes nothing.

    Literal forms, each replaced with str.replace: a 4 MB answer takes milliseconds, where one
    pattern matching any mix of encodings took seconds (and a text of backslashes far longer).
    A JSON answer is redacted again after it is parsed (`tree`), where every escape is undone."""

    secrets: tuple[str, ...]

    def __post_init__(self) -> None:
        forms: set[str] = set()
        for s in {s for s in self.secrets if s}:
            forms |= {s, repr(s)[1:-1]} | _json_forms(s) | _url_forms(s) | _base64_forms(s.encode("utf-8"))
        # the longest first: a form that holds a shorter one goes whole
        object.__setattr__(self, "forms", tuple(sorted(forms, key=lambda f: (-len(f), f))))

    def __call__(self, text: str) -> str:
        for form in self.forms:  # type: ignore[attr-defined]
            if form in text:
                text = text.replace(form, MASK)
        return text

    def snippet(self, text: str, limit: int) -> str:
        """`text` with whitespace folded, redacted, in at most `limit` characters: only the part that
        can be kept is redacted, and the edge where a secret may be cut in half is dropped."""
        text = " ".join(text.split())
        longest = max(map(len, self.forms), default=0)  # type: ignore[attr-defined]
        window = text[: limit + longest]
        head = self(window)
        if len(window) < len(text):
            head = head[: len(head) - longest]
        return head if len(head) <= limit and len(window) == len(text) else head[: limit - 3] + "..."

    def tree(self, value: Any) -> Any:
        """A parsed JSON value with every string in it (keys too) redacted; iterative, so a deep
        value cannot exhaust the stack."""
        if not self.forms:  # type: ignore[attr-defined]
            return value
        root: list[Any] = [value]
        stack: list[tuple[Any, Any]] = [(root, 0)]
        while stack:
            holder, at = stack.pop()
            item = holder[at]
            if isinstance(item, str):
                holder[at] = self(item)
            elif isinstance(item, list):
                stack += [(item, i) for i in range(len(item))]
            elif isinstance(item, dict):
                fresh = {self(k) if isinstance(k, str) else k: v for k, v in item.items()}
                item.clear()
                item.update(fresh)
                stack += [(item, k) for k in item]
        return root[0]


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The credentials a URL carries: its password, `user:password` and its base64 (what Basic auth
    sends) and the values of credential-like query parameters."""
    if not url:
        return ()
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # a malformed port or address: the whole userinfo is the secret
        head = url.split("://", 1)[-1].split("/", 1)[0]
        return (head.rsplit("@", 1)[0],) if "@" in head else ()
    user, password = unquote(user or ""), unquote(password or "")  # as sent (the encoded forms match too)
    pair = f"{user}:{password}"  # and as Basic auth sends it, which a server may echo encoded again
    out = [password, pair, base64.b64encode(pair.encode("utf-8")).decode("ascii")] if password else []
    if user and not password:  # a bare token as the user name (`https://TOKEN@host`)
        out.append(user)
    out += [v for k, v in parse_qsl(parts.query, keep_blank_values=False) if _SECRET_PARAM.search(k)]
    return tuple(s for s in out if s)


def shown_url(url: str | None) -> str | None:
    """`url` as messages and run.json show it: credentials (user info, credential-like query
    values) replaced by ***."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError:
        return Redactor(url_secrets(url))(url)
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(f"{k}={MASK}" if _SECRET_PARAM.search(k) else f"{k}={v}" if v or "=" in pair else k
                     for pair in parts.query.split("&") if pair
                     for k, _, v in [pair.partition("=")])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redactor(key: str | None, url: str | None, more: Iterable[str] = ()) -> Redactor:
    """The redactor of a backend: its API key, its URL's credentials and `more`."""
    return Redactor(tuple(s for s in (key, *url_secrets(url), *more) if s))


__all__ = ["MASK", "Redactor", "redactor", "shown_url", "url_secrets"]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def key_env_name(name: str) -> str:
    """`name` if it can name an environment variable; a key pasted as --api-key-env's value is refused
    without being echoed (the refusal would otherwise print it)."""
    if not _ENV_NAME.fullmatch(name):
        raise InputError("--api-key-env takes the NAME of an environment variable holding the key (letters, "
                         "digits, _), never the key itself: export KEY_VAR=... and pass --api-key-env KEY_VAR")
    return name
