"""Build the platforms' packages (`make gradescope`, `make autolab`, `make prairielearn`).

All carry the same payload: gradelib/ and the staff grader (autograder/, without
the instructor-only tools, autograder/tools/), fixtures/ with the hidden cases, and
requirements-grading.txt (torch, numpy, matplotlib, tqdm: what grading needs;
no jupyter, otter or pytest). The platform files live beside this module in
platform_files/.

- build/gradescope/autograder.zip: setup.sh and run_autograder at the root of
  the zip (Gradescope unpacks it to /autograder/source), then the payload.
- build/autolab/autograde.tar (the payload under autograde/),
  build/autolab/autograde-Makefile and build/autolab/Dockerfile, a recipe
  for the grading image in Tango's layout (Debian 12's Python, bubblewrap,
  the grading requirements), with wheels/ (a local CPU torch wheel, when
  given) and autodriver/ (Tango's autodriver, when given) beside it.
- build/prairielearn/course/: questions/attention_lm/ (info.json, question.html) and
  serverFilesCourse/attention_grader/ (the payload and `run`, the entrypoint); build/prairielearn/image/,
  the image's build folder (Debian 12's Python, bubblewrap, the grading requirements; wheels/ as for Autolab).

Grading needs Python 3.10 or newer (SUPPORTED_PYTHON), on every platform.

The archives are byte-identical for identical inputs (sorted entries, fixed
timestamps and modes).
"""

from __future__ import annotations

import argparse
import html
import io
import json
import shutil
import tarfile
import uuid
import zipfile
from pathlib import Path

from autograder.grading import rubric_check
from gradelib.handin_contract import HANDIN_FILES
from gradelib.problems import graded

REPO = Path(__file__).resolve().parents[2]
PLATFORM_FILES = Path(__file__).resolve().parent / "platform_files"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
EXECUTABLE = {"setup.sh", "run_autograder"}
SUPPORTED_PYTHON = "Python 3.10 or newer"
PL_QUESTION = "attention_lm"  # questions/<this>/ in the course
PL_GRADER = "attention_grader"  # serverFilesCourse/<this>/: the grader, its cases and the entrypoint
PL_TIMEOUT = 600  # the question's timeout, seconds: PrairieLearn's most
PL_IMAGE = "attention-grader:latest"


def payload() -> list[tuple[str, Path]]:
    """(path inside the package, source file) for the grader, its cases and requirements."""
    files = [("requirements-grading.txt", REPO / "requirements-grading.txt")]
    for top in ("gradelib", "autograder", "fixtures"):
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO)
            if not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc":
                continue
            if rel.parts[:2] == ("autograder", "tools"):
                continue
            files.append((rel.as_posix(), path))
    return files


def build_gradescope(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    target = out / "autograder.zip"
    entries = [(name, PLATFORM_FILES / name) for name in ("setup.sh", "run_autograder")] + payload()
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, src in entries:
            info = zipfile.ZipInfo(name, ZIP_TIME)
            info.external_attr = (0o100755 if name in EXECUTABLE else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, src.read_bytes())
    return target


def _image_folder(out: Path, dockerfile: Path, torch_wheel: Path | None, extra: tuple = ()) -> None:
    """A grading image's build folder: its Dockerfile, install-grader.sh, requirements-grading.txt, and wheels/
    with the local CPU `torch_wheel` when given; `extra`: (folder, file or None, name) of other files to put there.
    Each folder is emptied first, so an earlier build's file never lingers."""
    out.mkdir(parents=True, exist_ok=True)
    for folder, given, name in (("wheels", torch_wheel, None), *extra):
        shutil.rmtree(out / folder, ignore_errors=True)
        (out / folder).mkdir()
        if given is not None:
            if not given.is_file():
                raise SystemExit(
                    f"{given} is not a file "
                    f"(expected {'a CPU torch wheel' if name is None else 'the ' + name + ' program'})"
                )
            shutil.copy2(given, out / folder / (name or given.name))
    shutil.copyfile(dockerfile, out / "Dockerfile")
    shutil.copyfile(PLATFORM_FILES / "install-grader.sh", out / "install-grader.sh")
    shutil.copyfile(REPO / "requirements-grading.txt", out / "requirements-grading.txt")


def build_autolab(out: Path, torch_wheel: Path | None = None, autodriver: Path | None = None) -> tuple[Path, Path]:
    """The Autolab files in `out`; a local CPU `torch_wheel` and Tango's `autodriver` go where the Dockerfile's
    build finds them (wheels/, autodriver/)."""
    _image_folder(out, PLATFORM_FILES / "Dockerfile", torch_wheel, (("autodriver", autodriver, "autodriver"),))
    tar_path = out / "autograde.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, src in payload():
            data = src.read_bytes()
            info = tarfile.TarInfo(f"autograde/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    makefile = out / "autograde-Makefile"
    shutil.copyfile(PLATFORM_FILES / "autograde-Makefile", makefile)
    return tar_path, makefile


def prairielearn_info(image: str) -> dict:
    """The question's info.json: external grading in `image`, the grader from serverFilesCourse/, no network."""
    return {
        "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"attention-grader/{PL_QUESTION}")),
        "title": "Self-attention and language modeling: the handin",
        "topic": "Self-attention and language modeling",
        "type": "v3",
        "singleVariant": True,
        "gradingMethod": "External",
        "externalGradingOptions": {
            "enabled": True,
            "image": image,
            "serverFilesCourse": [f"{PL_GRADER}/"],
            "entrypoint": f"/grade/serverFilesCourse/{PL_GRADER}/run --job-timeout {PL_TIMEOUT}",
            "timeout": PL_TIMEOUT,
        },
    }


def build_prairielearn(out: Path, torch_wheel: Path | None = None, image: str = PL_IMAGE) -> tuple[Path, Path]:
    """out/course (the question and serverFilesCourse/<grader>/, the payload and its entrypoint) and out/image (the
    image's build folder); returns the question's folder and the image's."""
    course = out / "course"
    shutil.rmtree(course, ignore_errors=True)
    question, grader = course / "questions" / PL_QUESTION, course / "serverFilesCourse" / PL_GRADER
    question.mkdir(parents=True)
    for name, src in [*payload(), ("run", PLATFORM_FILES / "prairielearn" / "run")]:
        (grader / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, grader / name)
        (grader / name).chmod(0o755 if name == "run" else 0o644)
    (question / "info.json").write_text(json.dumps(prairielearn_info(image), indent=2) + "\n")
    items = "\n".join(f"    <li><code>{name}</code>: {html.escape(what)}</li>" for name, what in HANDIN_FILES.items())
    page = (PLATFORM_FILES / "prairielearn" / "question.html").read_text()
    (question / "question.html").write_text(
        page.replace("@FILE_LIST@", items).replace("@FILE_NAMES@", ", ".join(HANDIN_FILES)))
    _image_folder(out / "image", PLATFORM_FILES / "prairielearn" / "Dockerfile", torch_wheel)
    return question, out / "image"


def main() -> None:
    ap = argparse.ArgumentParser(description="Build the Gradescope zip, the Autolab files or PrairieLearn's question.")
    ap.add_argument("platform", choices=("gradescope", "autolab", "prairielearn"))
    ap.add_argument("--out", type=Path, default=None, help="default: build/<platform>/")
    ap.add_argument("--torch-wheel", type=Path, default=None, help="a local CPU torch wheel for the image")
    ap.add_argument("--autodriver", type=Path, default=None, help="autolab: Tango's autodriver, built, for the image")
    ap.add_argument("--image", default=PL_IMAGE, help=f"prairielearn: the image's name in info.json ({PL_IMAGE})")
    args = ap.parse_args()
    out = args.out or REPO / "build" / args.platform
    from ..reference.provenance import refusal

    why = refusal(REPO / "fixtures" / "lm")
    if why:  # a package whose thresholds belong to another corpus would refuse every upload
        raise SystemExit(f"{args.platform}: not packaging: {why}.")
    n = len(payload())
    if args.platform == "gradescope":
        target = build_gradescope(out)
        print(
            f"gradescope: wrote {target} ({target.stat().st_size / 2**20:.1f} MiB, {n + 2} files); "
            f"upload it as the assignment's autograder "
            f"(a base image with {SUPPORTED_PYTHON}, e.g. Ubuntu 22.04 or 24.04)"
        )
    elif args.platform == "autolab":
        tar_path, makefile = build_autolab(out, args.torch_wheel, args.autodriver)
        ids = ", ".join(graded(rubric_check.load()))
        print(
            f"autolab: wrote {tar_path} ({tar_path.stat().st_size / 2**20:.1f} MiB, {n} files) and {makefile}; "
            f"handin file name: handin.tar; problem names: {ids}; image: docker build -t attention-grader {out}"
            + ("" if args.autodriver else " (no AUTODRIVER given: add Tango's autodriver to the image, see the README)")
        )
    else:
        question, image = build_prairielearn(out, args.torch_wheel, args.image)
        print(
            f"prairielearn: wrote {question} and {question.parents[1] / 'serverFilesCourse' / PL_GRADER} ({n} files); "
            f"copy both into your course; image: docker build -t {args.image} {image} && docker push {args.image}"
            + ("" if args.torch_wheel else " (no TORCH_WHEEL: the build downloads torch from PyTorch's CPU index)")
        )

if __name__ == "__main__":
    main()
