"""Opening a handin never writes outside the scratch folder and refuses every unsafe archive clearly."""

from __future__ import annotations

import gzip
import io
import os
import tarfile

import pytest

from gradelib import intake as submission
from gradelib.intake import HandinError, copy_capped, open_handin


def _tar(path, members, mode="w"):
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as tar:
        for name, data, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            info.size = len(data) if data is not None else 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


REG = tarfile.REGTYPE
GOOD = ("attention.py", b"x = 1\n", REG, "")


@pytest.mark.parametrize(
    "members, fragment",
    [
        ([GOOD, ("/etc/owned", b"x", REG, "")], "points outside the archive"),
        ([GOOD, ("a/../../owned", b"x", REG, "")], "points outside the archive"),
        ([GOOD, ("passwd", None, tarfile.SYMTYPE, "/etc/passwd")], "is a link"),
        ([GOOD, ("shadow", None, tarfile.LNKTYPE, "/etc/shadow")], "is a link"),
        ([GOOD, ("null", None, tarfile.CHRTYPE, "")], "device or FIFO"),
        ([GOOD, ("disk", None, tarfile.BLKTYPE, "")], "device or FIFO"),
        ([GOOD, ("pipe", None, tarfile.FIFOTYPE, "")], "device or FIFO"),
        ([GOOD] + [(f"f{i}", b"x", REG, "") for i in range(64)], "more than 64 members"),
        ([], "empty archive"),
        ([("handin", None, tarfile.DIRTYPE, "")], "empty archive"),
    ],
    ids=["absolute", "dotdot", "symlink", "hardlink", "char_device", "block_device", "fifo", "too_many", "empty",
         "only_folder"],
)
def test_unsafe_archive_is_refused_and_nothing_is_extracted(tmp_path, members, fragment):
    archive = _tar(tmp_path / "handin.tar", members)
    dest = tmp_path / "scratch" / "files"
    with pytest.raises(HandinError, match=fragment):
        open_handin(archive, dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "owned").exists() and not os.path.exists("/etc/owned")


@pytest.mark.parametrize("data", [b"", b"hello, not a tar\n" * 50, b"PK\x03\x04" + bytes(200)], ids=["zero_bytes", "text", "zip"])
def test_something_that_is_not_a_tar_is_refused(tmp_path, data):
    path = tmp_path / "handin.tar"
    path.write_bytes(data)
    with pytest.raises(HandinError, match="is not a tar archive.*make handin"):
        open_handin(path, tmp_path / "files")


def test_truncated_gzip_is_refused_as_damaged(tmp_path):
    full = _tar(tmp_path / "full.tar.gz", [("attention.py", os.urandom(50_000), REG, "")], mode="w:gz").read_bytes()
    cut = tmp_path / "handin.tar.gz"
    cut.write_bytes(full[: len(full) // 2])
    with pytest.raises(HandinError, match="damaged"):
        open_handin(cut, tmp_path / "files")


def test_gzip_bomb_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    monkeypatch.setattr(submission, "MAX_TOTAL_BYTES", 2 * 2**20)
    monkeypatch.setattr(submission, "MAX_FILE_BYTES", 2 * 2**20)
    bomb = tmp_path / "handin.tar.gz"
    info = tarfile.TarInfo("attention.py")
    info.size = 64 * 2**20
    with open(bomb, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as gz:
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(64):
            gz.write(bytes(2**20))
    assert bomb.stat().st_size < 2**20
    with pytest.raises(HandinError, match="unpacks to more than 2 MB"):
        open_handin(bomb, tmp_path / "files")
    assert not (tmp_path / "files" / "attention.py").exists()


def test_copy_counts_the_bytes_actually_read_not_the_declared_size(tmp_path):
    # A stream longer than the cap, whatever a header claimed about it.
    with open(tmp_path / "out", "wb") as out, pytest.raises(HandinError, match="unpacks to more than"):
        copy_capped(io.BytesIO(bytes(3 * 2**20)), out, 2**20, "handin.tar")
    assert (tmp_path / "out").stat().st_size <= 2**20


def test_sparse_member_is_refused(tmp_path):
    archive = tmp_path / "handin.tar"
    _tar(archive, [GOOD])
    data = bytearray(archive.read_bytes())
    data[156] = ord("S")  # GNU sparse type flag of the first header
    chksum = sum(data[:148]) + 8 * 32 + sum(data[156:512])
    data[148:156] = b"%06o\0 " % chksum
    archive.write_bytes(bytes(data))
    with pytest.raises(HandinError, match="sparse"):
        open_handin(archive, tmp_path / "files")


def test_single_top_folder_is_stripped_and_nested_files_are_skipped(tmp_path):
    archive = _tar(tmp_path / "handin.tar", [("handin/attention.py", b"x = 1\n", REG, ""), ("handin/notes.txt", b"n", REG, "")])
    notes = open_handin(archive, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["attention.py", "notes.txt"] and notes == []
    archive = _tar(tmp_path / "nested.tar", [GOOD, ("deep/dir/evil.py", b"x", REG, "")])
    notes = open_handin(archive, tmp_path / "b")
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["attention.py"]
    assert any("top level" in n for n in notes)


def test_folder_handin_does_not_follow_symlinks(tmp_path):
    src = tmp_path / "handin"
    src.mkdir()
    (src / "attention.py").write_text("x = 1\n")
    (src / "secret.py").symlink_to("/etc/hostname")
    notes = open_handin(src, tmp_path / "files")
    assert [p.name for p in (tmp_path / "files").iterdir()] == ["attention.py"]
    assert any("symbolic links are not followed" in n for n in notes)
