"""Why a section does not run for a model: it does not apply (e.g. packed vision attention on CLIP)."""

from __future__ import annotations


class NotApplicable(Exception):
    """The section does not apply to this model (e.g. packed vision attention on CLIP)."""
