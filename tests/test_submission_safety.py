"""Opening a handin never writes outside the scratch folder, refuses every unsafe archive (tar or zip) clearly,
and takes in every upload shape a student or an LMS produces."""

from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import tarfile
import zipfile

import pytest

from autograder.batch.regrade import write_merged
from autograder.batch.results_json import to_json as to_results_json
from autograder.batch.worker import grade_hidden
from autograder.grading import uploads as submission
from autograder.grading.uploads import HandinError, copy_capped, open_handin, open_upload, resolve_upload
from autograder.isolation import Limits
from gradelib import rubric

from support import FIXTURES, SOLUTIONS


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


@pytest.mark.parametrize(
    "data", [b"", b"hello, not a tar\n" * 50, b"PK\x03\x04" + bytes(200)], ids=["zero_bytes", "text", "zip"]
)
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
    archive = _tar(
        tmp_path / "handin.tar", [("handin/attention.py", b"x = 1\n", REG, ""), ("handin/notes.txt", b"n", REG, "")]
    )
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


# ---------------------------------------------------------------- every upload shape, and zip vetted like tar

REFERENCE = (SOLUTIONS / "attention.py").read_bytes()
ATTENTION_MAX = sum(g.points for g in rubric.load()["attention"].groups)


def _zip(path, members, compression=zipfile.ZIP_DEFLATED):
    """members: (name, data) or a ZipInfo with data; written with zipfile, as a student's tool would."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for info, data in members:
            z.writestr(info, data)
    return path


def _tar_files(path, files, mode="w"):
    return _tar(path, [(n, d, REG, "") for n, d in files.items()], mode)


def _shape(root, shape):
    """The reference attention.py uploaded in `shape`; returns the path the grader is given."""
    files = {"attention.py": REFERENCE}
    root.mkdir()
    if shape == "folder":
        (root / "attention.py").write_bytes(REFERENCE)
        return root
    if shape == "folder_with_subfolder":
        (root / "handin").mkdir()
        (root / "handin" / "attention.py").write_bytes(REFERENCE)
        (root / ".DS_Store").write_bytes(b"\0")
        return root
    if shape == "tar":
        return _tar_files(root / "handin.tar", files)
    if shape == "tar_gz":
        return _tar_files(root / "handin.tar.gz", files, "w:gz")
    if shape == "tar_top_folder":
        return _tar_files(root / "handin.tar", {"handin/attention.py": REFERENCE})
    if shape == "zip":
        return _zip(root / "handin.zip", [("attention.py", REFERENCE)])
    if shape == "zip_top_folder_macos":
        return _zip(root / "handin.zip", [("my hw3/", b""), ("my hw3/attention.py", REFERENCE),
                                          ("__MACOSX/my hw3/._attention.py", b"\0\5\26\7")])
    if shape == "folder_holding_tar":  # what an LMS bulk download gives
        _tar_files(root / "Alice Smith_1234_handin.tar", files)
        return root
    if shape == "folder_holding_tgz_in_subfolder":
        (root / "attempt_1").mkdir()
        _tar_files(root / "attempt_1" / "handin.tgz", {"hw/attention.py": REFERENCE}, "w:gz")
        return root
    if shape == "folder_holding_zip":
        _zip(root / "submission.zip", [("attention.py", REFERENCE)])
        return root
    raise AssertionError(shape)


SHAPES = ["folder", "folder_with_subfolder", "tar", "tar_gz", "tar_top_folder", "zip", "zip_top_folder_macos",
          "folder_holding_tar", "folder_holding_tgz_in_subfolder", "folder_holding_zip"]


def _grade(path, only=("attention",)):
    return grade_hidden(path, case_root=FIXTURES, only=list(only) if only else None, limits=Limits(timeout_s=60))


# Grading is a function of the files the intake puts in place, so every shape is opened and compared
# with the plain folder's files; these shapes are also graded end to end.
GRADED_SHAPES = ("folder", "zip_top_folder_macos", "folder_holding_tgz_in_subfolder")


@pytest.mark.parametrize("shape", SHAPES)
def test_every_upload_shape_is_graded_like_the_plain_folder(tmp_path, shape):
    path = _shape(tmp_path / "upload", shape)
    intake = open_upload(path, tmp_path / "files")
    placed = {
        p.relative_to(tmp_path / "files").as_posix(): p.read_bytes()
        for p in (tmp_path / "files").rglob("*")
        if p.is_file()
    }
    assert placed == {"attention.py": REFERENCE}, (sorted(placed), intake.notes)
    if shape in GRADED_SHAPES:
        result = _grade(path)
        assert result.score == ATTENTION_MAX, (result.notes, [t.output for t in result.tests if not t.passed][:1])
        assert not any("missing" in t.output for t in result.tests)


def test_resolve_upload_names_the_archive_or_folder_the_handin_is_read_from(tmp_path):
    assert resolve_upload(_shape(tmp_path / "a", "folder_holding_zip")) == tmp_path / "a" / "submission.zip"
    assert resolve_upload(_shape(tmp_path / "b", "folder_with_subfolder")) == tmp_path / "b" / "handin"
    assert resolve_upload(_shape(tmp_path / "c", "folder")) == tmp_path / "c"
    tgz = _shape(tmp_path / "d", "folder_holding_tgz_in_subfolder")
    assert resolve_upload(tgz) == tgz / "attempt_1" / "handin.tgz"


def test_several_archives_in_a_folder_are_refused_with_their_names(tmp_path):
    root = tmp_path / "upload"
    root.mkdir()
    _tar_files(root / "old.tar", {"attention.py": b"x = 1\n"})
    _zip(root / "new.zip", [("attention.py", b"x = 2\n")])
    with pytest.raises(HandinError, match=r"2 archives \(new.zip, old.tar\).*submit one"):
        open_handin(root, tmp_path / "files")


def _zip_bytes_with(members, patch=None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in members:
            z.writestr(info, data)
    data = bytearray(buf.getvalue())
    if patch:
        patch(data)
    return bytes(data)


def _set_flag_bits(data, bit):
    """Set a general-purpose flag bit in every local and central header (zipfile cannot write encrypted zips)."""
    for sig, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        i = data.find(sig)
        while i >= 0:
            (flags,) = struct.unpack_from("<H", data, i + offset)
            struct.pack_into("<H", data, i + offset, flags | bit)
            i = data.find(sig, i + 4)


def _symlink_info(name):
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def _fifo_info(name):
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFIFO | 0o644) << 16
    return info


GOOD_ZIP = ("attention.py", b"x = 1\n")


@pytest.mark.parametrize(
    "members, patch, fragment",
    [
        ([GOOD_ZIP, ("../../owned.py", b"x")], None, "points outside the archive"),
        ([GOOD_ZIP, ("/tmp/owned.py", b"x")], None, "points outside the archive"),
        ([GOOD_ZIP, ("..\\..\\owned.py", b"x")], None, "points outside the archive"),
        ([GOOD_ZIP, ("C:/owned.py", b"x")], None, "points outside the archive"),
        ([GOOD_ZIP, (_symlink_info("passwd"), b"/etc/passwd")], None, "is a link"),
        ([GOOD_ZIP, (_fifo_info("pipe"), b"")], None, "device or FIFO"),
        ([GOOD_ZIP], lambda d: _set_flag_bits(d, 0x1), "is encrypted"),
        ([GOOD_ZIP, ("attention.py", b"x = 2\n")], None, "two members named attention.py"),
        ([GOOD_ZIP, ("./attention.py", b"x = 2\n")], None, "two members named attention.py"),
        ([GOOD_ZIP] + [(f"f{i}", b"x") for i in range(64)], None, "more than 64 members"),
        ([], None, "empty archive"),
        ([("handin/", b"")], None, "empty archive"),
    ],
    ids=["dotdot", "absolute", "backslash_dotdot", "drive_letter", "symlink", "fifo", "encrypted", "duplicate",
         "duplicate_dot_slash", "too_many", "empty", "only_folder"],
)
@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_unsafe_zip_is_refused_and_nothing_is_extracted(tmp_path, members, patch, fragment):
    archive = tmp_path / "handin.zip"
    archive.write_bytes(_zip_bytes_with(members, patch))
    dest = tmp_path / "scratch" / "files"
    with pytest.raises(HandinError, match=fragment):
        open_handin(archive, dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "owned.py").exists() and not os.path.exists("/tmp/owned.py")


def test_zip_bomb_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    monkeypatch.setattr(submission, "MAX_TOTAL_BYTES", 2 * 2**20)
    monkeypatch.setattr(submission, "MAX_FILE_BYTES", 2 * 2**20)
    bomb = _zip(tmp_path / "handin.zip", [("attention.py", bytes(64 * 2**20))])
    assert bomb.stat().st_size < 2**20
    with pytest.raises(HandinError, match="unpacks to more than 2 MB"):
        open_handin(bomb, tmp_path / "files")
    assert not (tmp_path / "files" / "attention.py").exists()


def test_zip_whose_headers_understate_the_size_is_refused_as_damaged(tmp_path, monkeypatch):
    monkeypatch.setattr(submission, "MAX_TOTAL_BYTES", 2 * 2**20)
    monkeypatch.setattr(submission, "MAX_FILE_BYTES", 2 * 2**20)

    def lie(data):  # declare 1000 bytes for a 3 MB member, in both headers
        struct.pack_into("<I", data, 22, 1000)
        i = data.find(b"PK\x01\x02")
        struct.pack_into("<I", data, i + 24, 1000)

    archive = tmp_path / "handin.zip"
    archive.write_bytes(_zip_bytes_with([("attention.py", bytes(3 * 2**20))], lie))
    assert archive.stat().st_size < 2**20
    with pytest.raises(HandinError, match="damaged zip archive"):
        open_handin(archive, tmp_path / "files")
    written = tmp_path / "files" / "attention.py"
    assert not written.exists() or written.stat().st_size <= 2 * 2**20


@pytest.mark.parametrize("data, fragment", [
    (b"", "is not a zip archive"),
    (b"PK\x03\x04" + bytes(200), "is not a zip archive"),
    (b"hello\n" * 100, "is not a zip archive"),
])
def test_something_that_is_not_a_zip_is_refused(tmp_path, data, fragment):
    path = tmp_path / "handin.zip"
    path.write_bytes(data)
    with pytest.raises(HandinError, match=fragment + ".*make handin"):
        open_handin(path, tmp_path / "files")


def test_zip_named_tar_says_what_it_is(tmp_path):
    path = tmp_path / "handin.tar"
    path.write_bytes(_zip_bytes_with([GOOD_ZIP]))
    with pytest.raises(HandinError, match="is not a tar archive .*zip archive.*handin.zip"):
        open_handin(path, tmp_path / "files")


# ---------------------------------------------------------------- names of any length or bytes


ODD_NAMES = {
    "300_chars": ("a" * 300 + ".py", "is 303 bytes long"),
    "nul_byte": ("x" * 120 + "\x00evil.py", "holds a NUL byte"),
    "control_chars": ("evil\x1b[31m\r.py", "holds control characters"),
    "not_utf8": ("caf\udce9.py", "is not UTF-8 text"),
}


@pytest.mark.parametrize("name, fragment", ODD_NAMES.values(), ids=ODD_NAMES.keys())
def test_odd_member_names_are_skipped_with_a_clean_note_and_the_rest_is_graded(tmp_path, name, fragment):
    archive = tmp_path / "handin.tar"
    # PAX carries any name whole (GNU would cut it at a NUL); the reader must cope with either.
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for n, data in (("attention.py", REFERENCE), (name, b"y")):
            info = tarfile.TarInfo(n)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    result = _grade(archive)
    assert result.score == ATTENTION_MAX
    notes = [n for n in result.notes if fragment in n]
    assert len(notes) == 1, result.notes
    assert not any(ch in notes[0] for ch in "\x00\x1b\r\udce9") and len(notes[0]) < 300
    # The worker writes these files; a raw name used to crash it here or earlier.
    write_merged(result, tmp_path / "out", {}, list(result.problems), merge_old=False)
    assert fragment in (tmp_path / "out" / "feedback.txt").read_text(encoding="utf-8")


def test_odd_file_names_in_an_uploaded_folder_are_skipped_too(tmp_path):
    root = tmp_path / "upload"
    root.mkdir()
    (root / "attention.py").write_bytes(b"x = 1\n")
    (root / "evil\x1b[2J.py").write_bytes(b"y")
    os.close(os.open(bytes(root) + b"/caf\xe9.py", os.O_CREAT | os.O_WRONLY, 0o644))
    intake = open_upload(root, tmp_path / "files")
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == ["attention.py"]
    assert len(intake.notes) == 2 and not any("\x1b" in n or "\udce9" in n for n in intake.notes + intake.found)


# ---------------------------------------------------------------- missing files: one note saying what was found


def test_missing_files_are_reported_once_with_what_the_upload_held(tmp_path):
    root = tmp_path / "upload"
    (root / "notes").mkdir(parents=True)
    (root / "Attention.py").write_bytes(REFERENCE)
    (root / "notes" / "todo\x1b.txt").write_bytes(b"x")
    (root / "a.py").write_bytes(b"x")
    (root / "b.py").write_bytes(b"x")
    result = _grade(root, only=None)
    assert result.score == 0
    top = result.notes[0]
    assert "lacks attention.py" in top and "Expected at the top level" in top
    assert "generated.txt (optional)" in top and "model.pt (optional)" not in top
    assert "Found: Attention.py, a.py, b.py, notes/todo?.txt." in top
    assert sum("Found:" in n for n in result.notes) == 1
    assert to_results_json(result, {})["output"].startswith("The handin lacks")


def test_found_list_is_capped_in_length(tmp_path):
    root = tmp_path / "upload"
    root.mkdir()
    for i in range(60):
        (root / f"{'long_name_' * 5}{i:02d}.txt").write_bytes(b"x")
    result = _grade(root, only=None)
    top = result.notes[0]
    assert "Found: " in top and "more)" in top and len(top.split("Found: ", 1)[1]) < 600


def test_found_list_names_the_members_of_an_opened_archive(tmp_path):
    root = tmp_path / "upload"
    root.mkdir()
    _zip(root / "handin.zip", [("hw/attn.py", b"x = 1\n"), ("hw/readme.txt", b"x")])
    result = _grade(root, only=None)
    assert "Found: handin.zip, handin.zip:hw/attn.py, handin.zip:hw/readme.txt." in result.notes[0]


def test_a_complete_handin_gets_no_missing_files_note(tmp_path):
    result = _grade(_shape(tmp_path / "upload", "zip"))
    assert not any("lacks" in n for n in result.notes)
