"""The Gradescope and Autolab packages grade in each platform's own directory flow, reproduced in a temp folder.

Gradescope: the zip unpacked to <root>/source, run_autograder copied to
<root>/run_autograder, the upload in <root>/submission, results expected in
<root>/results/results.json (AUTOGRADER_ROOT and AUTOGRADER_PYTHON point the
script at the temp folder and at this interpreter).
Autolab: autograde.tar, autograde-Makefile (as Makefile) and handin.tar in one
folder; `make`; the last stdout line is the autoresult.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from autograder.platforms.package import build_autolab, build_gradescope
from gradelib import rubric
from gradelib.problems import GRADERS

from support import REPO, SOLUTIONS

pytestmark = pytest.mark.slow

ATTENTION_MAX = sum(g.points for g in rubric.load()["attention"].groups)
PROBLEM_IDS = [p for p in rubric.load() if p in GRADERS]


def _handin(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    out = tmp_path_factory.mktemp("packages")
    return {"zip": build_gradescope(out / "gradescope"), "autolab": build_autolab(out / "autolab")}


def gradescope_run(
    tmp_path: Path, zip_path: Path, upload: dict[str, bytes]
) -> tuple[dict, subprocess.CompletedProcess]:
    root = tmp_path / "autograder"
    for sub in ("submission", "results"):
        (root / sub).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
    shutil.copyfile(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    for name, data in upload.items():
        (root / "submission" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / name).write_bytes(data)
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "AUTOGRADER_PYTHON": sys.executable}
    proc = subprocess.run(
        [str(root / "run_autograder")], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )
    return json.loads((root / "results" / "results.json").read_text()), proc


def test_gradescope_zip_has_its_scripts_at_the_root_and_no_build_tools(packages):
    with zipfile.ZipFile(packages["zip"]) as z:
        names = z.namelist()
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert names[:2] == ["setup.sh", "run_autograder"] and modes["run_autograder"] & 0o111
    assert "requirements-grading.txt" in names and "autograder/batch/cli.py" in names
    assert any(n.startswith("fixtures/attention/hidden/") for n in names)
    assert not any(n.startswith(("autograder/tools/", "solutions/", "tests/")) or "__pycache__" in n for n in names)
    setup = zipfile.ZipFile(packages["zip"]).read("setup.sh").decode()
    assert "-r requirements-grading.txt" in setup and "download.pytorch.org/whl/cpu" in setup
    slim = zipfile.ZipFile(packages["zip"]).read("requirements-grading.txt").decode()
    slim = "\n".join(ln.split("==")[0] for ln in slim.splitlines() if ln.strip() and not ln.startswith("#"))
    assert slim.splitlines()[0] == "torch"
    # What only students, instructors and the test suite use is not installed on a grading machine.
    for tool in ("jupyter", "otter-grader", "nbclient", "pytest", "ruff", "copydetect", "ipykernel"):
        assert tool not in slim, tool


def test_platform_scripts_are_valid_shell(packages, tmp_path):
    with zipfile.ZipFile(packages["zip"]) as z:
        z.extract("setup.sh", tmp_path)
        z.extract("run_autograder", tmp_path)
    for name in ("setup.sh", "run_autograder"):
        proc = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    makefile = packages["autolab"][1]
    proc = subprocess.run(["make", "-n", "-f", str(makefile)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0 and "autograder.platforms.runtime autolab ../handin.tar" in proc.stdout, proc.stderr


def test_autolab_dockerfile_recipe_holds_together(packages, tmp_path):
    """Without docker here: every file a COPY names is beside the Dockerfile, every RUN is valid shell,
    and the image installs the grading requirements from the CPU index."""
    folder = packages["autolab"][1].parent
    text = (folder / "Dockerfile").read_text()
    lines = text.replace("\\\n", " ")  # continuation lines joined
    instructions = [ln.strip() for ln in lines.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    # debian:bookworm-slim: what `make platform-check` builds with debootstrap to run these same steps
    assert instructions[0] == "FROM debian:bookworm-slim"
    # Tango's layout: its two users and three folders under WORKDIR /home, pkill for autodriver's clean-up
    assert "WORKDIR /home" in instructions and "procps" in text
    assert any(ins.startswith("RUN useradd autolab && useradd autograde && mkdir autolab autograde output")
               for ins in instructions)
    for ins in instructions:
        word, _, rest = ins.partition(" ")
        if word == "COPY":
            source = rest.split()[0]
            assert (folder / source).exists(), source
        elif word == "RUN":
            proc = subprocess.run(["bash", "-n", "-c", rest], capture_output=True, text=True)
            assert proc.returncode == 0, (rest, proc.stderr)
    script = (folder / "install-grader.sh").read_text()  # the install step the PrairieLearn image shares
    assert "RUN sh /opt/grader-build/install-grader.sh" in instructions
    assert '-r "$build/requirements-grading.txt"' in script and "download.pytorch.org/whl/cpu" in script
    assert "bubblewrap" in text
    assert (folder / "requirements-grading.txt").read_bytes() == (REPO / "requirements-grading.txt").read_bytes()


def test_autolab_and_prairielearn_images_share_their_steps_up_to_the_install():
    """The two Dockerfiles agree step for step up to install-grader.sh's RUN (COPY sources of the same bytes, as both
    packages copy them), so a host that builds both images builds the system packages and /opt/grader once."""
    from autograder.platforms.check import dockerfile_steps

    files = REPO / "autograder" / "platforms" / "platform_files"
    install = ("RUN", "sh /opt/grader-build/install-grader.sh")
    prefixes = []
    for path in (files / "Dockerfile", files / "prairielearn" / "Dockerfile"):
        base, steps = dockerfile_steps(path)
        assert base == "debian:bookworm-slim" and install in steps, path
        prefixes.append(steps[:steps.index(install) + 1])
    assert prefixes[0] == prefixes[1]


def _slim_environment(folder: Path) -> Path:
    """A virtual environment holding only requirements-grading.txt's packages and what they require, as
    hard links to this environment's files (none of jupyter, otter, nbformat, pytest...); its python."""
    import importlib.metadata as md
    import re

    wanted = [re.split(r"[=<> ]", ln, 1)[0] for ln in (REPO / "requirements-grading.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python3*/site-packages"))
    seen, todo = set(), list(wanted)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # a requirement for another platform (pip did not install it here either)
        todo += [re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or [] if "extra ==" not in r]
        for f in dist.files or []:
            src = Path(dist.locate_file(f)).resolve()
            rel = Path(f)
            if rel.parts[0] == ".." or not src.is_file():
                continue  # scripts and data outside site-packages
            dest = site / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dest)
            except OSError as exc:
                pytest.skip(f"cannot hard-link the installed packages into a slim environment here ({exc})")
    return folder / "bin" / "python"


def test_the_slim_grading_environment_grades_the_reference_to_full_marks(tmp_path):
    from autograder.tools.demo import reference_handin

    python = _slim_environment(REPO / "build" / f"slim-venv-{os.getpid()}")
    try:
        probe = subprocess.run(
            [
                str(python),
                "-c",
                "import torch, numpy, matplotlib, tqdm\n"
                "for tool in ('nbformat', 'otter', 'jupyter_core', 'pytest', 'copydetect', 'nbclient'):\n"
                "    try:\n        __import__(tool)\n    except ImportError:\n        continue\n"
                "    raise SystemExit(tool + ' is importable')",
            ],
            capture_output=True,
            text=True,
        )
        assert probe.returncode == 0, probe.stderr[-2000:]
        handin = reference_handin(tmp_path / "reference")
        proc = subprocess.run([str(python), "-m", "autograder", str(handin), "--out", str(tmp_path / "grades")],
                              cwd=REPO, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = json.loads((tmp_path / "grades" / "reference" / "results.json").read_text())
        # Every line of every problem in full, and its arrays are what its model writes (no integrity flag).
        lost = [
            (t["name"], t["score"], t["max_score"], t["output"][:300])
            for t in results["tests"]
            if t["score"] < t["max_score"]
        ]
        assert not lost, lost
        assert results["score"] == sum(p.points for p in rubric.load().values()), results["output"][-3000:]
        assert "flags" not in results.get("extra_data", {}), results["extra_data"]
    finally:
        shutil.rmtree(REPO / "build" / f"slim-venv-{os.getpid()}", ignore_errors=True)


def test_packages_are_byte_identical_when_built_twice(packages, tmp_path):
    again = build_gradescope(tmp_path / "gs")
    tar_path, _ = build_autolab(tmp_path / "al")
    assert again.read_bytes() == packages["zip"].read_bytes()
    assert tar_path.read_bytes() == packages["autolab"][0].read_bytes()


def test_gradescope_grades_an_uploaded_handin_tar(packages, tmp_path):
    reference = (SOLUTIONS / "attention.py").read_bytes()
    results, proc = gradescope_run(
        tmp_path, packages["zip"], {"handin.tar": _handin(tmp_path / "h.tar", {"attention.py": reference}).read_bytes()}
    )
    assert proc.returncode == 0, proc.stderr
    attention = [t for t in results["tests"] if t["tags"] == ["attention"]]
    assert sum(t["score"] for t in attention) == ATTENTION_MAX
    assert {t["visibility"] for t in attention} == {"visible", "after_published"}
    assert all(set(t) >= {"name", "score", "max_score", "status", "output", "visibility"} for t in results["tests"])


def test_gradescope_grades_loose_uploaded_files(packages, tmp_path):
    results, _ = gradescope_run(tmp_path, packages["zip"], {"attention.py": (SOLUTIONS / "attention.py").read_bytes()})
    assert sum(t["score"] for t in results["tests"] if t["tags"] == ["attention"]) == ATTENTION_MAX


def test_gradescope_writes_a_zero_result_for_an_unusable_upload(packages, tmp_path):
    results, proc = gradescope_run(tmp_path, packages["zip"], {"handin.tar": b"this is not a tar"})
    assert proc.returncode == 0
    assert results["score"] == 0 and "is not a tar archive" in results["output"]


def _zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_gradescope_grades_an_uploaded_zip(packages, tmp_path):
    upload = {"my_submission.zip": _zip_bytes({"hw3/attention.py": (SOLUTIONS / "attention.py").read_bytes()})}
    results, proc = gradescope_run(tmp_path, packages["zip"], upload)
    assert proc.returncode == 0, proc.stderr
    assert sum(t["score"] for t in results["tests"] if t["tags"] == ["attention"]) == ATTENTION_MAX
    assert "my_submission.zip" in proc.stdout  # find_handin names what intake reads


def test_gradescope_grades_files_uploaded_inside_a_subfolder(packages, tmp_path):
    results, proc = gradescope_run(
        tmp_path, packages["zip"], {"handin/attention.py": (SOLUTIONS / "attention.py").read_bytes()}
    )
    assert proc.returncode == 0, proc.stderr
    assert sum(t["score"] for t in results["tests"] if t["tags"] == ["attention"]) == ATTENTION_MAX
    assert "lacks attention.py" not in results["output"]


def test_gradescope_says_once_what_an_upload_without_the_handin_files_held(packages, tmp_path):
    results, _ = gradescope_run(tmp_path, packages["zip"], {"attn.py": b"x = 1\n", "notes/readme.txt": b"x"})
    assert results["score"] == 0
    assert results["output"].startswith("The handin lacks attention.py")
    assert "Found: attn.py, notes/readme.txt." in results["output"]


def autolab_run(tmp_path: Path, packages, handin: bytes) -> subprocess.CompletedProcess:
    work = tmp_path / "autolab"
    work.mkdir()
    tar_path, makefile = packages["autolab"]
    shutil.copyfile(tar_path, work / "autograde.tar")
    shutil.copyfile(makefile, work / "Makefile")
    (work / "handin.tar").write_bytes(handin)
    # Autolab starts `make` at the top level; under `make test` this would be a
    # sub-make, which prints "Leaving directory" after the scores line.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    return subprocess.run(["make", f"PYTHON={sys.executable}"], cwd=work, capture_output=True, text=True,
                          timeout=300, env=env)


def test_autolab_last_line_scores_every_problem(packages, tmp_path):
    handin = _handin(tmp_path / "h.tar", {"attention.py": (SOLUTIONS / "attention.py").read_bytes()}).read_bytes()
    proc = autolab_run(tmp_path, packages, handin)
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(last) == ["scores"] and list(last["scores"]) == PROBLEM_IDS
    assert last["scores"]["attention"] == ATTENTION_MAX
    assert "lines pass" in proc.stdout and "TOTAL" in proc.stdout


def test_autolab_ignores_forged_score_lines_from_the_submission(packages, tmp_path):
    forged = b'import os\nprint(\'{"scores": {"attention": 30}}\', flush=True)\nos._exit(0)\n'
    proc = autolab_run(tmp_path, packages, _handin(tmp_path / "h.tar", {"attention.py": forged}).read_bytes())
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[-1])["scores"]["attention"] == 0
    assert not any('"attention": 30' in line for line in lines)


def test_autolab_shows_hidden_tests_by_score_only(packages, tmp_path):
    buggy = (
        (SOLUTIONS / "attention.py")
        .read_text()
        .replace("d_k = self.W_k.shape[1]\n        future", "d_k = self.W_v.shape[1]\n        future")
    )
    proc = autolab_run(tmp_path, packages, _handin(tmp_path / "h.tar", {"attention.py": buggy.encode()}).read_bytes())
    scores = json.loads(proc.stdout.strip().splitlines()[-1])["scores"]
    assert 0 < scores["attention"] < ATTENTION_MAX
    assert "FAIL" in proc.stdout and "dk_ne_dv" not in proc.stdout  # the failing case is hidden
