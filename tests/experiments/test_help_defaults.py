"""Every `--help` shows every option's default (issue 28 item 4): an option whose default is not
None ("not given") nor SUPPRESS and that takes a value says `default` in its help, once."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from evprobe.experiments.cli import build_parser, shown_default
from evprobe.experiments.registry import names as registered

COMMANDS = registered()  # every subcommand, in --help's order (experiments.registry)


def _parsers(parser: argparse.ArgumentParser, name: str = "evprobe") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child_name, child in action.choices.items():
                yield from _parsers(child, f"{name} {child_name}")


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_option_with_a_default_shows_it() -> None:
    checked, missing = 0, []
    parsers = list(_parsers(build_parser()))
    assert len(parsers) > len(COMMANDS)  # every subcommand (and the organism's `train`)
    for name, parser in parsers:
        page = _flat(parser.format_help())
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.default in (None, argparse.SUPPRESS):
                continue
            if action.nargs == 0:  # a switch (store_true): off unless given
                continue
            entry = _flat(formatter._format_action(action))  # this option's lines of --help
            assert action.option_strings[0] in page
            own = action.help or ""
            if isinstance(action, argparse.BooleanOptionalAction) or "default" in own.lower():
                ok = "default" in entry.lower()
            else:
                ok = f"(default: {shown_default(action)})" in entry
            checked += 1
            if not ok:
                missing.append(f"{name} {action.option_strings[0]}: {entry}")
    assert not missing, missing
    assert checked > 30  # the walk reached the subcommands' options


def test_a_default_is_said_once() -> None:
    for name, parser in _parsers(build_parser()):
        page = parser.format_help()
        for entry in re.split(r"\n  (?=-)", page):
            assert _flat(entry).lower().count("(default:") <= 1, (name, entry)


def test_an_option_without_help_shows_its_default() -> None:
    import argparse

    checked = 0
    for name, parser in _parsers(build_parser()):
        page = _flat(parser.format_help())
        for a in parser._actions:
            if a.option_strings and a.help is None and a.default not in (None, argparse.SUPPRESS, False):
                assert f"(default: {a.default})" in page, (name, a.option_strings)
                checked += 1
    assert checked >= 1
