"""YAML configs read with limits (core.yaml_files): aliases, nesting, size, odd values and files, one line each."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from evprobe.core.errors import ConfigError
from evprobe.core.json_files import MAX_NESTING
from evprobe.core.yaml_files import MAX_CONFIG_BYTES, read_yaml
from evprobe.experiments.config import load_config
from evprobe.experiments.dose_response import DoseResponseConfig


def alias_bomb() -> str:
    """The issue's 500-byte config: nine anchors, each nine aliases of the one before, under `alphas:`
    (9**9 = 387,420,489 floats once expanded; it grew past 5.6 GB and aborted)."""
    items = ["&a0 [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"]
    items += [f"&a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "model: m\nbench: b\ndirections: d\nalphas:\n" + "".join(f"  - {x}\n" for x in items)


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def test_the_alias_bomb_fails_fast_in_bounded_memory(tmp_path: Path) -> None:
    """In a process capped at 1 GiB of address space, load_config refuses the bomb in one line, in seconds."""
    path = write(tmp_path / "bomb.yaml", alias_bomb())
    assert len(path.read_bytes()) < 1500
    script = textwrap.dedent(f"""
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from evprobe.core.errors import ConfigError
        from evprobe.experiments.config import load_config
        from evprobe.experiments.dose_response import DoseResponseConfig
        start = time.perf_counter()
        try:
            load_config(DoseResponseConfig, {str(path)!r})
        except ConfigError as err:
            print(f"{{time.perf_counter() - start:.3f}}", err)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, message = done.stdout.strip().split(" ", 1)
    assert message == (f"{path}:6: an alias (*a0): evprobe configs take no aliases or merge keys (<<); "
                       "write the value out in full")
    assert float(seconds) < 1.0


def test_aliases_and_merge_keys_are_refused_anchors_alone_are_not(tmp_path: Path) -> None:
    assert "alias (*b)" in refused(write(tmp_path / "m.yaml", "base: &b {x: 1}\nother:\n  <<: *b\n"))
    assert ":2: an alias (*x)" in refused(write(tmp_path / "a.yaml", "a: &x 1\nb: *x\n"))
    assert read_yaml(write(tmp_path / "ok.yaml", "a: &x [1, 2]\nb: 3\n")) == {"a": [1, 2], "b": 3}


@pytest.mark.parametrize("open_, close", [("[", "]"), ("{a: ", "}")])
def test_nesting_past_the_limit_is_refused_before_composing(tmp_path: Path, open_: str, close: str) -> None:
    deep = write(tmp_path / "deep.yaml", "alphas: " + open_ * 5000 + close * 5000 + "\n")
    assert "deep.yaml" in refused(deep)  # libyaml's own limit (1,000) or ours: one line, no RecursionError
    over = write(tmp_path / "over.yaml", "x:\n  y: " + open_ * MAX_NESTING + close * MAX_NESTING + "\n")
    assert f"over.yaml:2: lists or mappings nested more than {MAX_NESTING} levels deep" in refused(over)
    at = write(tmp_path / "at.yaml", "x: " + open_ * (MAX_NESTING - 1) + close * (MAX_NESTING - 1) + "\n")
    assert isinstance(read_yaml(at)["x"], (list, dict))


def test_a_config_larger_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    body = "alphas: [" + ", ".join(["0.5"] * (MAX_CONFIG_BYTES // 5)) + "]\n"
    assert f"larger than {MAX_CONFIG_BYTES:,} bytes" in refused(write(tmp_path / "big.yaml", body))
    start = time.perf_counter()
    fits = "alphas: [" + ", ".join(["0.5"] * ((MAX_CONFIG_BYTES - 20) // 5)) + "]\n"
    assert len(read_yaml(write(tmp_path / "fits.yaml", fits))["alphas"]) > 20_000
    assert time.perf_counter() - start < 10  # about 0.6 s with libyaml


def test_values_the_constructor_cannot_make_name_their_line(tmp_path: Path) -> None:
    assert "big.yaml:2: a value YAML cannot read (Exceeds the limit (4300 digits)" in refused(
        write(tmp_path / "big.yaml", "model: m\nalphas: [" + "9" * 5000 + "]\n"))
    assert "date.yaml:2: a value YAML cannot read (month must be in 1..12)" in refused(
        write(tmp_path / "date.yaml", "model: m\nbench: 2024-13-45\n"))


def test_a_fifo_or_a_folder_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    assert "is not a regular file" in refused(fifo)  # no writer: an open without O_NONBLOCK would hang
    assert "is not a regular file" in refused(tmp_path)


def test_load_config_passes_the_loaders_line_on(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"e\.yaml:2: an alias"):
        load_config(DoseResponseConfig, write(tmp_path / "e.yaml", "alphas: &x [1.0]\nlayers: *x\n"))


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab:-&*<[]{}, \n'\"!|>%#9.")), max_size=80))
def test_any_text_is_a_mapping_or_one_config_error_line(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    """Open-ended: whatever a YAML file holds, the reader returns a dict or raises one ConfigError line;
    a returned dict equals safe_load's (the limits only refuse, never change a value)."""
    path = write(tmp_path_factory.mktemp("y") / "c.yaml", text)
    try:
        got = read_yaml(path)
    except ConfigError as err:
        assert "\n" not in str(err) and str(path) in str(err)
        return
    assert got == (yaml.safe_load(text) or {})


def test_the_limits_hold_under_a_small_address_space() -> None:
    """The cap the bomb test relies on is real here (a 2 GiB allocation fails under it)."""
    script = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
              "try:\n    bytearray(2 << 30)\nexcept MemoryError:\n    print('capped')\n")
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout.strip() == "capped"
