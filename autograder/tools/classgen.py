"""A synthetic class of handins for testing and benchmarking the batch grader.

    python -m autograder.tools.classgen DEST

writes 55 submissions under DEST/submissions/ and DEST/expected.json, which
says for each what the grader must give it:

- "full": the attention problem earns all its points (correct code, packed
  every way a student might: folder, tar, tar.gz, tar with a top folder);
- "partial": attention earns some points but not all (a typical bug: each is a
  precise edit of solutions/attention.py, asserted to apply; two bugs that
  break every rubric line are expected to earn 0);
- "zero": the whole submission earns 0 -- attacks (infinite loop, sleeping
  forever, os._exit with forged score lines, killing the grader, stealing
  hidden cases, memory blow-up, orphaned processes), unsafe or malformed
  archives of every kind, missing files and malformed prediction/generation
  arrays.

Deterministic: the same DEST contents every time (fixed seeds, mtime 0).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
REFERENCE = (REPO / "solutions" / "attention.py").read_text()

# name -> [(old, new)] edits of the reference; every `old` must occur exactly once.
BUGS: dict[str, list[tuple[str, str]]] = {
    "no_scaling": [
        ("(self.A_w / math.sqrt(d_k)).masked_fill", "self.A_w.masked_fill"),
        ("(dLdA_sig - row_dot) / math.sqrt(d_k)", "(dLdA_sig - row_dot)"),
    ],
    "scale_by_sqrt_dv": [
        ("T = X.shape[1]\n        d_k = self.W_k.shape[1]", "T = X.shape[1]\n        d_k = self.W_v.shape[1]")
    ],
    "softmax_over_columns": [
        ("scores.max(dim=-1, keepdim=True)", "scores.max(dim=1, keepdim=True)"),
        ("weights.sum(dim=-1, keepdim=True)", "weights.sum(dim=1, keepdim=True)"),
    ],
    "no_causal_mask": [('.masked_fill(future, float("-inf"))', "")],
    "mask_hides_diagonal": [("diagonal=1)", "diagonal=0)")],
    "no_max_subtraction": [("scores = scores - scores.max(dim=-1, keepdim=True).values\n", "")],
    "stores_scaled_scores": [
        (
            "self.A_w = self.Q @ self.K.transpose(1, 2)",
            "self.A_w = self.Q @ self.K.transpose(1, 2) / math.sqrt(self.W_k.shape[1])",
        ),
        ("(self.A_w / math.sqrt(d_k)).masked_fill", "self.A_w.masked_fill"),
    ],
    "queries_from_key_weights": [("self.Q = X @ self.W_q", "self.Q = X @ self.W_k")],
    "dLdV_without_transpose": [
        ("self.dLdV = self.A_sig.transpose(1, 2) @ dLdXnew", "self.dLdV = self.A_sig @ dLdXnew")
    ],
    "dLdK_without_transpose": [("self.dLdK = dLdA_w.transpose(1, 2) @ self.Q", "self.dLdK = dLdA_w @ self.Q")],
    "weight_grads_averaged": [
        ("(X_t @ self.dLdQ).sum(dim=0)", "(X_t @ self.dLdQ).mean(dim=0)"),
        ("(X_t @ self.dLdK).sum(dim=0)", "(X_t @ self.dLdK).mean(dim=0)"),
        ("(X_t @ self.dLdV).sum(dim=0)", "(X_t @ self.dLdV).mean(dim=0)"),
    ],
    "dLdX_misses_value_path": [(" + self.dLdV @ self.W_v.T", "")],
    "softmax_jacobian_diagonal_only": [("(dLdA_sig - row_dot)", "dLdA_sig")],
    "backward_not_written": [
        (
            "        d_k = self.W_k.shape[1]\n\n        dLdA_sig",
            '        raise NotImplementedError("later")\n        dLdA_sig',
        )
    ],
}

# Bugs that reach every rubric line on both case sets, so they rightly earn nothing:
# an overflowing softmax gives NaN on the large-score case of each set, and wrong
# queries make every quantity from Q on wrong (and Q, K, V are one line).
BUGS_SCORING_ZERO = {"no_max_subtraction", "queries_from_key_weights"}

# Attacks: each is a complete attention.py that computes nothing correct and misbehaves.
ATTACKS: dict[str, str] = {
    "infinite_loop_at_import": "while True:\n    pass\n",
    # Its output reaches the feedback (the last lines before the timeout), so it
    # also tries to inject markup into report.html.
    "sleeps_forever": (
        "import time\n"
        'print(\'<script>document.title="pwned"</script><img src=x onerror="document.title=1">\', flush=True)\n'
        "time.sleep(10**6)\n"
    ),
    "exit_with_forged_scores": (
        "import json, os, sys\n"
        "print(json.dumps({'scores': {'attention': 30, 'losses': 100, 'prediction': 100}}))\n"
        "print(json.dumps({'score': 1000, 'tests': []}))\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    ),
    "forged_lines_then_raise": (
        "class Attention:\n"
        "    def __init__(self, *w):\n"
        '        print(\'{"scores":{"attention":30.0}}\', flush=True)\n'
        "    def forward(self, X):\n"
        '        raise RuntimeError(\'{"scores":{"attention":30.0}}\')\n'
        "    def backward(self, d):\n"
        "        raise RuntimeError('PASS')\n"
    ),
    "kills_the_grader": (
        "import os, signal\n"
        "for kill, target in ((os.kill, os.getppid()), (os.killpg, os.getppid())):\n"
        "    try:\n        kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "raise SystemExit(0)\n"
    ),
    "orphaned_sleepers": (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        time.sleep(10**6)\n"
        "        os._exit(0)\n"
        "os._exit(0)\n"
    ),
    # Each block is zero-filled, so the memory is really used, up to the address-space cap.
    "memory_blow_up": "blocks = []\nwhile True:\n    blocks.append(bytearray(1024 * 1024 * 1024))\n",
    "steals_hidden_cases": (
        "import glob, numpy as np, torch\n"
        f"FIXTURES = {str(REPO / 'fixtures')!r}\n"
        "def _find(X):\n"
        "    for path in glob.glob(FIXTURES + '/attention/*/*.npz'):\n"
        "        with np.load(path) as d:\n"
        "            if d['X'].shape == tuple(X.shape) and np.array_equal(d['X'], X.numpy()):\n"
        "                return {k[9:]: torch.from_numpy(d[k]) for k in d.files if k.startswith('expected_')}\n"
        "    raise FileNotFoundError('no case found')\n"
        "class Attention:\n"
        "    def __init__(self, *w):\n        pass\n"
        "    def forward(self, X):\n"
        "        self.e = _find(X)\n"
        "        for k, v in self.e.items():\n            setattr(self, k, v)\n"
        "        return self.e['X_new']\n"
        "    def backward(self, d):\n        return self.e['dLdX']\n"
    ),
    "writes_outside_scratch": (
        "import os\n"
        f"for path in ({str(REPO / 'fixtures' / 'attention' / 'hidden' / 'cases.json')!r}, "
        f"'/tmp/owned', '../../owned'):\n"
        "    try:\n        open(path, 'w').write('[]')\n    except OSError:\n        pass\n"
        "raise SystemExit(0)\n"
    ),
    "floods_stdout": 'import sys\nwhile True:\n    sys.stdout.write(\'{"scores":{"attention":30}}\\n\' * 1000)\n',
}


def _edit(source: str, edits: list[tuple[str, str]]) -> str:
    for old, new in edits:
        found = source.count(old)
        if found != 1:
            raise ValueError(f"edit expects one occurrence of {old!r} in solutions/attention.py, found {found}")
        source = source.replace(old, new)
    return source


def _info(name: str, size: int = 0, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode, info.mtime = size, kind, 0o644, 0
    return info


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w") -> None:
    with tarfile.open(path, mode, format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return _info(name, len(data)), data


def _folder(path: Path, files: dict[str, bytes]) -> None:
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).write_bytes(data)


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=arr.dtype.hasobject)
    return buf.getvalue()


def _gzip_bomb(path: Path, inflated_mb: int) -> None:
    """A small .tar.gz that inflates to `inflated_mb` MB of zeros."""
    zeros = b"\0" * (1024 * 1024)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        info = _info("attention.py", inflated_mb * len(zeros))
        gz.write(info.tobuf(format=tarfile.GNU_FORMAT))
        for _ in range(inflated_mb):
            gz.write(zeros)
        gz.write(b"\0" * 1024)


# The bugs a sampled class keeps (make_class(sample=True)): one scoring zero, two partial.
SAMPLED_BUGS = ("no_max_subtraction", "no_causal_mask", "weight_grads_averaged")


def _correct(subs: Path, good: bytes) -> dict[str, str]:
    """Correct, packed every way a student might."""
    _folder(subs / "correct_folder", {"attention.py": good})
    _tar(subs / "correct_tar.tar", [_file("attention.py", good)])
    _tar(subs / "correct_targz.tar.gz", [_file("attention.py", good)], mode="w:gz")
    _tar(
        subs / "correct_top_folder.tar",
        [(_info("handin", kind=tarfile.DIRTYPE), None), _file("handin/attention.py", good)],
    )
    _tar(subs / "correct_with_extra_file.tar", [_file("attention.py", good), _file("notes/scratch.txt", b"ignored")])
    (subs / "correct_in_student_folder").mkdir()
    _tar(subs / "correct_in_student_folder" / "handin.tar", [_file("attention.py", good)])
    return {n: "full" for n in ("correct_folder", "correct_tar.tar", "correct_targz.tar.gz", "correct_top_folder.tar",
                                "correct_with_extra_file.tar", "correct_in_student_folder/handin.tar")}


def _archives(subs: Path, good: bytes, rng: np.random.Generator) -> dict[str, str]:
    """Unsafe or malformed archives; most also hold a correct attention.py, which must not help them."""
    unsafe: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
        "absolute_path": [_file("attention.py", good), _file("/tmp/owned.py", b"x")],
        "dotdot_path": [_file("attention.py", good), _file("../../owned.py", b"x")],
        "symlink": [_file("attention.py", good), (_info("passwd", kind=tarfile.SYMTYPE), None)],
        "hardlink": [_file("attention.py", good), (_info("shadow", kind=tarfile.LNKTYPE), None)],
        "char_device": [_file("attention.py", good), (_info("null", kind=tarfile.CHRTYPE), None)],
        "fifo": [_file("attention.py", good), (_info("pipe", kind=tarfile.FIFOTYPE), None)],
        "too_many_members": [_file("attention.py", good)] + [_file(f"f{i:03d}.txt", b"x") for i in range(70)],
        "empty_tar": [],
        "only_a_folder": [(_info("handin", kind=tarfile.DIRTYPE), None)],
    }
    unsafe["symlink"][1][0].linkname = "/etc/passwd"
    unsafe["hardlink"][1][0].linkname = "/etc/shadow"
    for name, members in unsafe.items():
        _tar(subs / f"archive_{name}.tar", members)
    _gzip_bomb(subs / "archive_gzip_bomb.tar.gz", 150)
    (subs / "archive_not_a_tar.tar").write_bytes(rng.bytes(4096))
    (subs / "archive_zero_bytes.tar").write_bytes(b"")
    whole = io.BytesIO()
    with tarfile.open(fileobj=whole, mode="w:gz") as tar:
        tar.addfile(_info("attention.py", len(good)), io.BytesIO(good))
    (subs / "archive_truncated.tar.gz").write_bytes(whole.getvalue()[: len(whole.getvalue()) // 2])
    zip_bytes = io.BytesIO()
    with zipfile.ZipFile(zip_bytes, "w") as z:
        z.writestr(zipfile.ZipInfo("attention.py", (1980, 1, 1, 0, 0, 0)), good)
    (subs / "archive_zip_not_tar.tar").write_bytes(zip_bytes.getvalue())
    expected = {}
    for name in [*unsafe, "gzip_bomb", "not_a_tar", "zero_bytes", "truncated", "zip_not_tar"]:
        suffix = ".tar.gz" if name in ("gzip_bomb", "truncated") else ".tar"
        expected[f"archive_{name}{suffix}"] = "zero"
    return expected


def _missing(subs: Path, good: bytes, rng: np.random.Generator) -> dict[str, str]:
    """Missing or unusable files."""
    stub = (REPO / "handout" / "attention.py").read_bytes()
    missing = {
        "missing_empty_folder": {},
        "missing_wrong_file_name": {"Attention.py": good},
        "missing_syntax_error": {"attention.py": good.replace(b"def forward(self, X):", b"def forward(self, X)")},
        "missing_blank_stub": {"attention.py": stub},
        "missing_not_python": {"attention.py": rng.bytes(2048)},
    }
    for name, files in missing.items():
        _folder(subs / name, files)
    return dict.fromkeys(missing, "zero")


def _arrays(subs: Path, rng: np.random.Generator) -> dict[str, str]:
    """Fabricated, malformed language-model outputs (and nothing else)."""
    logits = rng.standard_normal((128, 20, 30)).astype(np.float32)
    ids = rng.integers(2, 30, size=(128, 30))
    with_nan = logits.copy()
    with_nan[3, 4, 5] = np.nan
    with_eos = ids.copy()
    with_eos[7, 0] = 0
    arrays = {
        "npy_predictions_wrong_shape": {"predictions.npy": _npy(logits[:, :10])},
        "npy_predictions_int_dtype": {"predictions.npy": _npy(ids[:, :20, None].repeat(30, axis=2))},
        "npy_predictions_nan": {"predictions.npy": _npy(with_nan)},
        "npy_predictions_pickle": {"predictions.npy": _npy(np.array([{"__reduce__": "os.system"}] * 3, dtype=object))},
        "npy_generated_eos": {"generated.npy": _npy(with_eos)},
        "npy_generated_out_of_vocab": {"generated.npy": _npy(ids + 30)},
        "npy_generated_float": {"generated.npy": _npy(ids.astype(np.float64))},
        "npy_generated_not_npy": {"generated.npy": b"not an array\n" * 100},
    }
    for name, files in arrays.items():
        _folder(subs / name, files)
    return dict.fromkeys(arrays, "zero")


def make_class(dest: Path, sample: bool = False) -> dict[str, str]:
    """Write the class under dest/submissions; return submission file name -> expectation.

    `sample`: every kind and every attack, archive and file problem, but only SAMPLED_BUGS of the
    planted bugs (each bug is graded on its own in the attention bug tests); for the test suite.
    """
    subs = dest / "submissions"
    if subs.exists():
        shutil.rmtree(subs)
    subs.mkdir(parents=True)
    good = REFERENCE.encode()
    rng = np.random.default_rng(5)
    expected = _correct(subs, good)
    for name, edits in BUGS.items():
        if sample and name not in SAMPLED_BUGS:
            continue
        _tar(subs / f"bug_{name}.tar", [_file("attention.py", _edit(REFERENCE, edits).encode())])
        expected[f"bug_{name}.tar"] = "zero" if name in BUGS_SCORING_ZERO else "partial"
    for name, source in ATTACKS.items():
        _folder(subs / f"attack_{name}", {"attention.py": source.encode()})
        expected[f"attack_{name}"] = "zero"
    expected |= _archives(subs, good, rng)
    expected |= _missing(subs, good, rng)
    expected |= _arrays(subs, rng)
    (dest / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    return expected


def main() -> None:
    ap = argparse.ArgumentParser(description="Write a synthetic class of handins and what each must score.")
    ap.add_argument("dest", type=Path)
    args = ap.parse_args()
    expected = make_class(args.dest)
    kinds = {k: sum(v == k for v in expected.values()) for k in ("full", "partial", "zero")}
    print(f"classgen: wrote {len(expected)} submissions to {args.dest / 'submissions'} ({kinds})")


if __name__ == "__main__":
    main()
