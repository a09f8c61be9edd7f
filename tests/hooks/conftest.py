"""Tiny handles for the hooks tests: each architecture built once per test module, shared by its tests.

Tests that need another answer prefix take `handle.with_answer_prefix(...)` (a copy), so no test
leaves a changed handle behind for the next.
"""

from __future__ import annotations

import pytest

from evprobe.hooks import TINY_ARCHS, Handle, tiny


@pytest.fixture(scope="module")
def handles() -> dict[str, Handle]:
    """arch -> its tiny handle, filled as tests ask (`tiny_handle`)."""
    return {}


def tiny_handle(handles: dict[str, Handle], arch: str) -> Handle:
    if arch not in handles:
        handles[arch] = tiny(arch)
    return handles[arch]


@pytest.fixture(params=TINY_ARCHS)
def handle(request, handles) -> Handle:
    return tiny_handle(handles, request.param)
