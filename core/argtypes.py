"""Value types for command-line flags, shared by every `evprobe` subcommand.

Each raises `argparse.ArgumentTypeError` with a message naming the bad value, which argparse turns
into a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    value = integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def nonnegative_int(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def str_list(text: str) -> tuple[str, ...]:
    """'a, b,c' -> ('a', 'b', 'c'); empty parts are dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in str_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in str_list(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers") from None


def int_or(word: str):
    """A flag type accepting one integer or the literal `word` (e.g. `--layer best`)."""

    def parse(text: str) -> int | str:
        if text.strip() == word:
            return word
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {word!r} or an integer") from None

    return parse


def int_list_or(word: str):
    """A flag type accepting comma-separated integers or the literal `word` (e.g. `--layers all`)."""

    def parse(text: str) -> tuple[int, ...] | str:
        if text.strip() == word:
            return word
        try:
            return tuple(int(part) for part in str_list(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {word!r} or comma-separated integers") from None

    return parse
