"""Attacks on the grader's own process through the upload itself: a tar whose header announces a gigabyte (a PAX
extended or global header, a GNU long name or long link name) inside an upload of about 1 MB, which tarfile
read whole before any member check (1,065 MB held, 27 s of CPU in the worker, then graded as if nothing
happened); a zip member compressed with bzip2 or LZMA, which zipfile inflates a whole read at a time
(autograder/grading/uploads.py).

What must hold: each is refused before the grader holds more than a few tens of MB, with a message that says
what the archive held, how big, and what a handin may hold. Each upload is opened in a process of its own,
capped at 1.5 GB of address space, so a regression fails there, bounded. The grader's own reading, not
isolation: the same at every level, so opened once, outside any sandbox.
"""

from __future__ import annotations

import io
import json
import re
import resource
import struct
import subprocess
import sys
import tarfile
import tracemalloc
import zipfile
import zlib

import pytest

from support import REPO

pytestmark = pytest.mark.attacks

MIB, GIB = 1 << 20, 1 << 30
ATTENTION = b"x = 1\n"
# Opens the upload as the batch worker does; prints the peak of this process image (VmHWM) and its CPU seconds.
OPEN = r"""
import json, resource, sys, tempfile
from pathlib import Path
sys.path.insert(0, {repo!r})
from autograder.grading.uploads import HandinError, open_upload
try:
    with tempfile.TemporaryDirectory() as folder:
        open_upload(Path({upload!r}), Path(folder) / "files")
        said = "opened"
except HandinError as exc:
    said = str(exc)
use = resource.getrusage(resource.RUSAGE_SELF)
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) // 1024
print(json.dumps({{"said": said, "peak_mb": peak, "cpu_s": use.ru_utime + use.ru_stime}}))
"""


def open_bounded(upload) -> dict:
    """open_upload(upload) in a process of its own under 1.5 GB of address space: what it said, its peak, its CPU."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1536 * MIB, 1536 * MIB))

    proc = subprocess.run([sys.executable, "-c", OPEN.format(repo=str(REPO), upload=str(upload))],
                          capture_output=True, text=True, timeout=120, preexec_fn=cap)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def gzip_of(parts) -> bytes:
    """A gzip stream of `parts` (bytes, or (a byte, count): a run of it), made in about a second for a GiB: a run's
    MiB is deflated once and repeated (after a full flush, the same input deflates to the same bytes)."""
    comp, out, crc, size = zlib.compressobj(9, zlib.DEFLATED, -15), [], 0, 0
    for part in parts:
        if isinstance(part, tuple):
            byte, count = part
            chunk = byte * MIB
            assert count % MIB == 0
            out += [comp.compress(chunk) + comp.flush(zlib.Z_FULL_FLUSH)] * (count // MIB)
            for _ in range(count // MIB):
                crc = zlib.crc32(chunk, crc)
            size += count
        else:
            out.append(comp.compress(part) + comp.flush(zlib.Z_FULL_FLUSH))
            crc, size = zlib.crc32(part, crc), size + len(part)
    out.append(comp.flush())
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + b"".join(out) + struct.pack("<II", crc, size % 2**32)


def header(name: str, size: int, kind: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def member() -> bytes:
    """attention.py and the end of the archive."""
    return header("attention.py", len(ATTENTION), tarfile.REGTYPE) + ATTENTION.ljust(512, b"\0") + bytes(1024)


# The header that announces a GiB -> (its type flag, the GiB's byte, what the message calls it).
ANNOUNCED = {
    "pax_extended_header": (tarfile.XHDTYPE, b"\0", "a PAX extended header"),
    "pax_global_header": (tarfile.XGLTYPE, b"\0", "a PAX global header"),
    "gnu_long_name": (tarfile.GNUTYPE_LONGNAME, b"a", "a GNU long name"),
    "gnu_long_link_name": (tarfile.GNUTYPE_LONGLINK, b"a", "a GNU long link name"),
}


@pytest.mark.parametrize("attack", list(ANNOUNCED))
def test_a_tar_header_that_announces_a_gigabyte_is_refused_before_it_is_read(tmp_path, attack):
    """A 1 GiB PAX header in a 1 MB upload: the worker held 1,065 MB and spent 27 s of CPU, then graded it 30/30
    with nothing said (a GNU long name of 1 GiB: more, as its name is copied again). Now refused, from its
    header, holding what Python and the grader's modules take."""
    kind, byte, words = ANNOUNCED[attack]
    upload = tmp_path / "handin.tar.gz"
    upload.write_bytes(gzip_of([header("././@LongLink", GIB, kind), (byte, GIB), member()]))
    assert upload.stat().st_size < 2 * MIB
    opened = open_bounded(upload)
    assert opened["said"] == (
        f"handin.tar.gz holds {words} of 1,073,741,824 bytes; a handin's tar headers may hold 262,144 bytes of "
        "names and attributes in all (a few hundred a file); build it with `make handin`, which writes handin.tar"
    ), opened
    assert opened["peak_mb"] < 100 and opened["cpu_s"] < 10, opened


def test_many_small_headers_are_counted_together(tmp_path):
    """Each header small, many together: 32 PAX global headers of 64 KB (160,000 records, each applying to every
    member after it) between 63 members with an extended header each, in a 2 MB tar: tarfile copies the global
    records into every such member, and the worker held 239 MB. Refused once the headers pass 256 KB in all."""
    parts, key = [], 0
    for n in range(63):
        if n < 32:
            records = b"".join(b"13 k%07d=\n" % (key + i) for i in range(5000))  # 65,000 bytes
            key += 5000
            parts.append(header("././@PaxHeader", len(records), tarfile.XGLTYPE) + records.ljust(65024, b"\0"))
        else:
            parts.append(header("././@PaxHeader", 13, tarfile.XHDTYPE) + b"13 path=a.py\n".ljust(512, b"\0"))
        parts.append(header(f"f{n}", 1, tarfile.REGTYPE) + b"x".ljust(512, b"\0"))
    upload = tmp_path / "handin.tar"
    upload.write_bytes(b"".join(parts) + bytes(1024))
    opened = open_bounded(upload)
    assert opened["said"].startswith("handin.tar holds PAX headers and GNU long names of more than 262,144 bytes;"), \
        opened
    assert opened["peak_mb"] < 100, opened


def test_a_chain_of_headers_and_a_sparse_map_are_refused(tmp_path):
    """Two extended headers before one member (tarfile reads them recursively, copying the global ones into each),
    a header that declares a negative size (tarfile would step back and read the same headers again), and GNU
    sparse data of format 1.0, whose map tarfile reads block by block until it holds as many numbers as it says."""
    from autograder.grading.uploads import HandinError, open_upload

    record = b"13 path=a.py\n"
    pax = header("././@PaxHeader", len(record), tarfile.XHDTYPE) + record.ljust(512, b"\0")
    chain = tmp_path / "chain.tar"
    chain.write_bytes(pax + pax + member())
    negative = bytearray(header("attention.py", 0, tarfile.REGTYPE))
    negative[124:136] = b"\xff" * 12  # base-256: -1
    negative[148:156] = b"%06o\0 " % (sum(negative[:148]) + 8 * 32 + sum(negative[156:512]))
    backwards = tmp_path / "negative.tar"
    backwards.write_bytes(bytes(negative) + bytes(1024))
    sparse_records = b"22 GNU.sparse.major=1\n22 GNU.sparse.minor=0\n"
    sparse = tmp_path / "sparse.tar"
    sparse.write_bytes(header("././@PaxHeader", len(sparse_records), tarfile.XHDTYPE)
                       + sparse_records.ljust(512, b"\0") + member()[:1024] + b"99999999999\n".ljust(512, b"0"))
    for upload, said in ((chain, "chain.tar holds two PAX extended headers before one member (a tar writes one)"),
                         (backwards, "negative.tar holds a tar header of -1 bytes"),
                         (sparse, "sparse.tar: member 'attention.py' is a sparse file")):
        with pytest.raises(HandinError, match=re.escape(said)):
            open_upload(upload, tmp_path / upload.stem)


@pytest.mark.parametrize("method", ["bzip2", "LZMA"])
def test_a_zip_member_zipfile_would_inflate_whole_is_refused(tmp_path, method):
    """zipfile inflates a bzip2 or LZMA member a whole read at a time (its first read asks for 1 MB of the
    archive), whatever size the headers declare: 1 GiB of zeros in a 150 KB LZMA member was one allocation of a
    GiB. Deflate, which zipfile inflates to the size asked for, and stored members are what handins use."""
    upload = tmp_path / "handin.zip"
    compression = zipfile.ZIP_BZIP2 if method == "bzip2" else zipfile.ZIP_LZMA
    with zipfile.ZipFile(upload, "w", compression) as zf:
        zf.writestr("attention.py", ATTENTION)
    opened = open_bounded(upload)
    assert opened["said"] == (f"handin.zip: member 'attention.py' is compressed with {method}; a handin zip uses "
                              "deflate (what zip, Finder and Windows make) or no compression"), opened


@pytest.mark.parametrize("method", [zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2, zipfile.ZIP_DEFLATED])
def test_zipfile_inflates_bzip2_and_lzma_a_whole_read_at_a_time(method):
    """Why the two are refused, with zipfile alone: asked for 1 MB of a member of 64 MiB of zeros (a few KB of
    the archive), it holds all 64 MiB at once for bzip2 and LZMA, about 1 MB for deflate. Within the 200 MB cap
    on an upload, a bzip2 member inflates to far more than the machine holds."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        zf.writestr("attention.py", bytes(64 * MIB))
    assert len(buf.getvalue()) < 256 * 1024
    with zipfile.ZipFile(buf) as zf, zf.open("attention.py") as src:
        tracemalloc.start()
        try:
            got = len(src.read(MIB))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert got == MIB
    if method == zipfile.ZIP_DEFLATED:
        assert peak < 8 * MIB, peak
    else:
        assert peak >= 64 * MIB, peak
