"""The one error type for bad input: a one-line message naming file, line, field and the fix.

Every reader and every command raises it for what the user can mend (a file, a flag, a folder);
the CLI prints its message and exits with status 2. A reader that leaves out the unterminated last
line of an append-only log warns with `IncompleteLineWarning` (`core.files.read_complete_lines`).
"""

import json
import re
import warnings
from typing import Any

# What must not reach a terminal raw from a file: C0 and C1 controls (ANSI escapes, carriage returns,
# newlines), zero-width and bidirectional formatting characters, line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


class InputError(ValueError):
    """Bad input; the message names the file, line and field, and the fix."""


class ConfigError(ValueError):
    """A config that cannot be used as given; the message is one line naming the file, key and fix."""


class OneLineWarning(UserWarning):
    """A warning shown as one stderr line, `evprobe: warning: <message>` (no source line after it)."""


class IncompleteLineWarning(OneLineWarning):
    """An append-only log's last line has no newline yet (a run is still writing it, or was killed):
    a reader left it out and touched nothing. Shown as one line, `evprobe: warning: <message>`."""


def _format_warning(message, category, filename, lineno, line=None):  # noqa: ANN001, ANN202 - warnings' own signature
    """OneLineWarning as one stderr line (no source line after it); every other warning as before."""
    if isinstance(category, type) and issubclass(category, OneLineWarning):
        return f"evprobe: warning: {printable(str(message))}\n"
    return _PLAIN_FORMAT(message, category, filename, lineno, line)


if not getattr(warnings.formatwarning, "_evprobe", False):  # once, however often this module is reloaded
    _PLAIN_FORMAT = warnings.formatwarning
    _format_warning._evprobe = True  # type: ignore[attr-defined]
    warnings.formatwarning = _format_warning


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (\\x1b, \\n, \\u202e), as `repr` would,
    and nothing else changed: text read from a file (a lock holder's command, a name) reaches a
    terminal as text, never as an escape sequence that recolours, moves or hides what follows."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def shown(value: Any, limit: int = 60) -> str:
    """`value` as a message shows it: strings quoted ('false'), the rest as JSON (true, null, NaN)."""
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
