"""Build the Gradescope and Autolab autograder packages (`make gradescope`, `make autolab`).

Both carry the same payload: gradelib/ and the staff grader (autograder/, without
the instructor-only build tools), fixtures/ with the hidden cases, and
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

Grading needs Python 3.10 or newer (SUPPORTED_PYTHON), on every platform.

The archives are byte-identical for identical inputs (sorted entries, fixed
timestamps and modes).
"""

from __future__ import annotations

import argparse
import io
import shutil
import tarfile
import zipfile
from pathlib import Path

from autograder.batch.pool import selected_problems

REPO = Path(__file__).resolve().parents[2]
PLATFORM_FILES = Path(__file__).resolve().parent / "platform_files"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
EXECUTABLE = {"setup.sh", "run_autograder"}
SUPPORTED_PYTHON = "Python 3.10 or newer"


def payload() -> list[tuple[str, Path]]:
    """(path inside the package, source file) for the grader, its cases and requirements."""
    files = [("requirements-grading.txt", REPO / "requirements-grading.txt")]
    for top in ("gradelib", "autograder", "fixtures"):
        for path in sorted((REPO / top).rglob("*")):
            rel = path.relative_to(REPO)
            if not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc":
                continue
            if rel.parts[:2] == ("autograder", "build"):
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


def build_autolab(out: Path, torch_wheel: Path | None = None, autodriver: Path | None = None) -> tuple[Path, Path]:
    """The Autolab files in `out`; a local CPU `torch_wheel` and Tango's `autodriver` go where the Dockerfile's
    build finds them (wheels/, autodriver/: emptied first, so an earlier build's never lingers)."""
    out.mkdir(parents=True, exist_ok=True)
    for folder, given, name in (("wheels", torch_wheel, None), ("autodriver", autodriver, "autodriver")):
        shutil.rmtree(out / folder, ignore_errors=True)
        (out / folder).mkdir()
        if given is not None:
            if not given.is_file():
                raise SystemExit(
                    f"autolab: {given} is not a file "
                    f"(expected {'a CPU torch wheel' if name is None else 'the autodriver program'})"
                )
            shutil.copy2(given, out / folder / (name or given.name))
    tar_path = out / "autograde.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, src in payload():
            data = src.read_bytes()
            info = tarfile.TarInfo(f"autograde/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    makefile = out / "autograde-Makefile"
    shutil.copyfile(PLATFORM_FILES / "autograde-Makefile", makefile)
    shutil.copyfile(PLATFORM_FILES / "Dockerfile", out / "Dockerfile")
    shutil.copyfile(REPO / "requirements-grading.txt", out / "requirements-grading.txt")
    return tar_path, makefile


def main() -> None:
    ap = argparse.ArgumentParser(description="Build the Gradescope zip or the Autolab files.")
    ap.add_argument("platform", choices=("gradescope", "autolab"))
    ap.add_argument("--out", type=Path, default=None, help="default: build/<platform>/")
    ap.add_argument("--torch-wheel", type=Path, default=None, help="autolab: a local CPU torch wheel for the image")
    ap.add_argument("--autodriver", type=Path, default=None, help="autolab: Tango's autodriver, built, for the image")
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
    else:
        tar_path, makefile = build_autolab(out, args.torch_wheel, args.autodriver)
        ids = ", ".join(p.id for p in selected_problems(None))
        print(
            f"autolab: wrote {tar_path} ({tar_path.stat().st_size / 2**20:.1f} MiB, {n} files) and {makefile}; "
            f"handin file name: handin.tar; problem names: {ids}; image: docker build -t attention-grader {out}"
            + ("" if args.autodriver else " (no AUTODRIVER given: add Tango's autodriver to the image, see the README)")
        )


if __name__ == "__main__":
    main()
