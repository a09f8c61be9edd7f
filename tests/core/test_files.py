"""`evprobe.core.files.ensure_folder`: a folder that cannot be made is one line naming the path in the way.

The broken input: `--out` a dangling symbolic link printed mkdir's bare `[Errno 17] File exists`;
an --out that is a file, or under a file, printed errno lines too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evprobe.core.errors import InputError
from evprobe.core.files import atomic_write_bytes, ensure_folder
from evprobe.experiments.cli import main


def test_ensure_folder_makes_a_folder_once(tmp_path: Path) -> None:
    assert ensure_folder(tmp_path / "a" / "b") is True
    assert ensure_folder(tmp_path / "a" / "b") is False and (tmp_path / "a" / "b").is_dir()


def test_a_dangling_link_names_its_target_and_the_fix(tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(InputError, match=f"^{link} is a symbolic link to {tmp_path / 'gone'}, which does not exist; "
                                         "create the folder it points to, remove the link, or use another --out$"):
        ensure_folder(link)
    with pytest.raises(InputError, match=f"^{link} is a symbolic link .* so the folder {link / 'sub'} cannot be made"):
        ensure_folder(link / "sub")  # a dangling link on the way
    with pytest.raises(InputError, match="symbolic link"):
        atomic_write_bytes(link / "x.json", b"{}")  # every atomic write makes its folder the same way
    assert not (tmp_path / "gone").exists()


def test_a_link_to_a_file_and_a_file_are_named(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    with pytest.raises(InputError, match=f"^{file} is a file, not a folder; move it aside or use another --out$"):
        ensure_folder(file)
    with pytest.raises(InputError, match=f"^{file} is a file, not a folder, so the folder {file / 'a' / 'b'} "):
        ensure_folder(file / "a" / "b")
    link = tmp_path / "link"
    link.symlink_to(file)
    with pytest.raises(InputError, match=f"^{link} is a symbolic link to {file}, which is not a folder"):
        ensure_folder(link)
    assert file.read_text() == "x"


def test_the_cli_prints_one_line_for_a_dangling_out(small_bench: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    link = tmp_path / "run"
    link.symlink_to(tmp_path / "elsewhere" / "run")
    for command in (["run", "--model", "policy:random", "--bench", str(small_bench), "--out", str(link)],
                    ["report", str(small_bench.parent), "--out", str(link)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Errno" not in err, err
        assert err.startswith(f"evprobe: error: {link} is a symbolic link to ") and "use another --out" in err
    assert not (tmp_path / "elsewhere").exists()
