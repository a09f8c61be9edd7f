"""The organism's reduced quickstart (tests/experiments/conftest.py), shared with the analysis tests
that read the organism's items as a user's own prompts: one build per session across both folders."""

from tests.experiments.conftest import small_quickstart  # noqa: F401  (a fixture, found by pytest here)
