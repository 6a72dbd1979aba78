"""Unit tests of the atomic file write (core/files.py)."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from pytest_torch.core import files
from pytest_torch.core.files import replacing, write_atomically

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")


def _leftovers(path):
    return sorted(p.name for p in path.parent.glob(f".{path.name}.*.tmp"))


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_text_is_written_as_utf8_with_its_newlines_kept(tmp_path):
    path = tmp_path / "baselines.json"
    write_atomically(path, '{\n  "µs": 1\n}\n')
    assert path.read_bytes() == '{\n  "µs": 1\n}\n'.encode()
    write_atomically(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert _leftovers(path) == []


@posix_only
def test_a_new_file_is_readable_by_others_and_a_replaced_one_keeps_its_mode(tmp_path):
    path = tmp_path / "report.json"
    write_atomically(path, "1")
    assert _mode(path) == files.NEW_FILE_MODE  # not the temporary file's 0o600
    path.chmod(0o640)
    write_atomically(path, "2")
    assert _mode(path) == 0o640
    assert path.read_text() == "2"


def test_the_content_reaches_the_disk_before_the_rename(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b)))
    write_atomically(tmp_path / "a.txt", "x")
    with replacing(tmp_path / "b.bin") as temporary:
        temporary.write_bytes(b"y")
    assert events == ["fsync", "replace", "fsync", "replace"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch, error):
    path = tmp_path / "baselines.json"
    path.write_text("old")

    def fail(*args):
        raise error

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(type(error)):
        write_atomically(path, "new")
    assert path.read_text() == "old"
    assert _leftovers(path) == []


def test_a_writer_writes_beside_the_target_and_its_file_replaces_it(tmp_path):
    path = tmp_path / "heatmap.png"
    path.write_bytes(b"old")
    with replacing(path) as temporary:
        assert temporary.parent == tmp_path
        assert temporary.name.startswith(".heatmap.png.") and temporary.name.endswith(".tmp")
        assert temporary.exists()
        assert path.read_bytes() == b"old", "replaced only once the writer is done"
        temporary.write_bytes(b"new")
    assert path.read_bytes() == b"new"
    assert _leftovers(path) == []


def _write_half_then_fail(path):
    with replacing(path) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("cannot pickle")


def test_a_writer_that_fails_leaves_the_target_untouched(tmp_path):
    path = tmp_path / "tensors.pt"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="cannot pickle"):
        _write_half_then_fail(path)
    assert path.read_bytes() == b"old"
    assert _leftovers(path) == []
    with pytest.raises(RuntimeError):
        _write_half_then_fail(tmp_path / "new.pt")
    assert not (tmp_path / "new.pt").exists()
    assert _leftovers(tmp_path / "new.pt") == []


def test_a_missing_folder_is_an_error_not_a_new_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(tmp_path / "missing" / "file.json", "{}")
    assert not (tmp_path / "missing").exists()
