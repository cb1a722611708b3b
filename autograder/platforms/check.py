"""A fresh-image check of the platform packages (`make platform-check`, as root on Linux).

Builds a Debian 12 root file system (debootstrap, cached under build/platform-check/), then in a fresh
copy of it for each platform:

- Gradescope: unpacks build/gradescope/autograder.zip to /autograder/source, runs its setup.sh as the
  image build does, then grades through /autograder/run_autograder, as root with Docker's default
  capability set and read-only cgroups: the reference as loose files and as a handin.tar, a partial
  handin and a broken one. Each results.json is checked against Gradescope's documented format.
- Autolab: runs the Dockerfile's steps (its base, debian:bookworm-slim, is what debootstrap makes),
  then grades a job as Tango's autodriver runs it: the job's files in the `autograde` user's home, `make`
  as that user under Tango's default process, file-size and time limits, the last line read as the
  autoresult. (tests/isolation/test_container.py runs Tango's exact command in the image on a real Docker engine.)
- PrairieLearn: runs its image's Dockerfile steps the same way, then grades each upload (but the tar: pl-file-upload
  takes files by name) as its host runs a job: /grade laid out (serverFilesCourse/, student/, data/), the question's
  entrypoint run as root with Docker's default capabilities; each results.json checked against PrairieLearn's format
  (the broken upload must be not gradable).

It prints each step's time, the download and install sizes, and each handin's score. Where PyTorch's CPU
index cannot be reached, torch comes from the local CPU wheel in --torch-wheel (or PIP_FIND_LINKS), and
the output says so. Minutes, not part of `make test`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

from gradelib import rubric

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "build" / "platform-check"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
DOCKER_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
               "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap")
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu/torch/"
HANDIN_CASES = ("reference files", "reference handin.tar", "partial", "broken")
# Gradescope's results.json (its autograder specification): top-level and per-test keys and their types.
RESULT_KEYS = {"score": (int, float), "execution_time": (int, float), "output": str, "visibility": str,
               "stdout_visibility": str, "extra_data": dict, "tests": list}
TEST_KEYS = {"score": (int, float), "max_score": (int, float), "name": str, "output": str, "visibility": str,
             "status": str, "tags": list}
VISIBILITIES = {"visible", "hidden", "after_due_date", "after_published"}
PL_TEST_KEYS = {"name": str, "points": (int, float), "max_points": (int, float), "message": str}  # PrairieLearn's


def say(text: str) -> None:
    print(f"platform-check: {text}", flush=True)


# ---------------------------------------------------------------- the Debian root and running in it

def base_root() -> Path:
    """A Debian 12 minbase root, made once (the stamp says it finished)."""
    root = WORK / SUITE
    if (root / ".made").is_file():
        say(f"Debian 12 root: {root} (made earlier)")
        return root
    if not shutil.which("debootstrap"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    subprocess.run(["debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE, str(root), MIRROR],
                   check=True, stdout=subprocess.DEVNULL)
    (root / ".made").write_text("")
    say(f"Debian 12 root made by debootstrap in {time.monotonic() - start:.0f} s: {size(root)}")
    return root


@contextlib.contextmanager
def fresh_copy(base: Path):
    """A throwaway copy of the base root (an overlay: the base is never changed)."""
    top = Path(tempfile.mkdtemp(prefix="root-", dir=WORK))
    for name in ("upper", "work", "root"):
        (top / name).mkdir()
    opts = f"lowerdir={base},upperdir={top / 'upper'},workdir={top / 'work'}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(top / "root")], check=True)
    try:
        shutil.copyfile("/etc/resolv.conf", top / "root" / "etc" / "resolv.conf")
        yield top / "root"
    finally:
        subprocess.run(["umount", "-R", str(top / "root")], check=False)
        shutil.rmtree(top, ignore_errors=True)


def in_root(root: Path, script: str, *, env: dict[str, str] | None = None, docker: bool = False,
            binds: dict[str, str] | None = None, timeout: float = 3600) -> subprocess.CompletedProcess:
    """Run a shell script inside `root` (its own mount and PID namespaces, /proc, /dev and /sys mounted),
    as root; with `docker`, with Docker's default capabilities and read-only cgroups, as a container runs."""
    mounts = [f"mount --rbind /dev {root}/dev", f"mount -t proc proc {root}/proc", f"mount --rbind /sys {root}/sys"]
    for src, dest in (binds or {}).items():
        make = (f"mkdir -p {root}{dest}" if Path(src).is_dir() else
                f"mkdir -p {root}{shlex.quote(str(Path(dest).parent))} && touch {root}{shlex.quote(dest)}")
        mounts += [make, f"mount --bind {shlex.quote(src)} {root}{shlex.quote(dest)}"]
    if docker:
        mounts.append(f"for m in $(awk '$2 ~ \"^{root}/sys/fs/cgroup\" {{print $2}}' /proc/self/mounts); do "
                      "mount -o remount,bind,ro \"$m\" 2>/dev/null || true; done")
    exports = " ".join(
        f"{k}={shlex.quote(v)}"
        for k, v in {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": "/root",
            "LANG": "C.UTF-8",
            **(env or {}),
        }.items()
    )
    inner = f"env -i {exports} /bin/bash -c {shlex.quote(script)}"
    if docker:
        caps = ",".join(f"+{c}" for c in DOCKER_CAPS)
        inner = f"setpriv --bounding-set=-all,{caps} --inh-caps=-all -- {inner}"
    outer = " && ".join(["mount --make-rprivate /", *mounts, f"exec chroot {root} {inner}"])
    return subprocess.run(["unshare", "--mount", "--pid", "--fork", "--", "sh", "-c", outer], capture_output=True,
                          text=True, timeout=timeout)


def size(path: Path) -> str:
    out = subprocess.run(["du", "-sh", "--apparent-size", str(path)], capture_output=True, text=True).stdout.split()
    return out[0] if out else "?"


def checked(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"platform-check: {what} failed (exit {proc.returncode}); its output is above")
    return proc


# ---------------------------------------------------------------- the handins

def handins(dest: Path) -> dict[str, Path]:
    """The four uploads: the reference as loose files and as handin.tar, a partial one, a broken one."""
    from autograder.tools.demo import reference_handin

    ref = reference_handin(dest / "reference")
    tar_dir = dest / "tar"
    tar_dir.mkdir()
    with tarfile.open(tar_dir / "handin.tar", "w") as tar:
        for f in sorted(ref.iterdir()):
            tar.add(f, arcname=f.name)
    partial = dest / "partial"
    partial.mkdir()
    for name in ("attention.py", "01_mlm_and_next_token.ipynb"):
        shutil.copyfile(ref / name, partial / name)
    broken = dest / "broken"
    broken.mkdir()
    (broken / "attention.py").write_text("class Attention(:\n    pass\n")
    (broken / "01_mlm_and_next_token.ipynb").write_text('{"cells": [')
    return dict(zip(HANDIN_CASES, (ref, tar_dir, partial, broken)))


def format_problems(results: dict) -> list[str]:
    """Where a results.json departs from Gradescope's format ([] when it conforms)."""
    wrong = [
        f"{k}: {type(results.get(k)).__name__}" for k, t in RESULT_KEYS.items() if not isinstance(results.get(k), t)
    ]
    wrong += [k for k in ("visibility", "stdout_visibility") if results.get(k) not in VISIBILITIES]
    for test in results.get("tests", []):
        wrong += [f"test {test.get('name')!r} {k}" for k, t in TEST_KEYS.items() if not isinstance(test.get(k), t)]
        if test.get("visibility") not in VISIBILITIES or test.get("status") not in ("passed", "failed"):
            wrong.append(f"test {test.get('name')!r} visibility/status")
    total = sum(t["score"] for t in results.get("tests", []))
    if abs(total - results.get("score", -1)) > 1e-6:
        wrong.append(f"score {results.get('score')} is not the sum of the tests' {total}")
    return wrong


# ---------------------------------------------------------------- the platforms

def host_network() -> tuple[dict[str, str], dict[str, str]]:
    """(environment, binds) that let pip in the image reach the registries as this machine does: a host whose
    traffic passes a proxy with a certificate authority of its own (PIP_CERT) lends that bundle to the image."""
    cert = os.environ.get("PIP_CERT")
    if cert and Path(cert).is_file():
        return {"PIP_CERT": "/host-ca/ca.crt"}, {cert: "/host-ca/ca.crt"}
    return {}, {}


def torch_source(wheel: Path | None) -> tuple[dict[str, str], dict[str, str], str]:
    """(environment, binds, what was used) for installing torch in the image: PyTorch's CPU index when it
    answers, else the local CPU wheel."""
    env, binds = host_network()
    try:
        urllib.request.urlopen(PYTORCH_CPU_INDEX, timeout=10).close()
        return env, binds, "PyTorch's CPU index"
    except OSError as exc:
        if wheel is None or not wheel.is_file():
            raise SystemExit(f"platform-check: PyTorch's CPU index is unreachable ({exc}) and no local torch wheel "
                             "was given (--torch-wheel)") from None
        return ({**env, "TORCH_WHEEL": f"/wheels/{wheel.name}"}, {**binds, str(wheel.parent): "/wheels"},
                f"the local file {wheel} (PyTorch's CPU index is unreachable from here: {exc})")


def gradescope(base: Path, uploads: dict[str, Path], wheel: Path | None) -> dict:
    from autograder.platforms.package import build_gradescope

    package = build_gradescope(WORK / "gradescope")
    env, binds, how = torch_source(wheel)
    out: dict = {"torch": how, "cases": {}}
    with fresh_copy(base) as root:
        with zipfile.ZipFile(package) as z:
            z.extractall(root / "autograder" / "source")
        for name in ("setup.sh", "run_autograder"):
            os.chmod(root / "autograder" / "source" / name, 0o755)
        start = time.monotonic()
        checked(
            in_root(root, "cd /autograder/source && bash ./setup.sh", env=env, binds=binds), "Gradescope's setup.sh"
        )
        out["setup_s"] = time.monotonic() - start
        out["venv"] = size(root / "autograder" / "venv")
        out["apt"] = size(root / "var" / "cache" / "apt" / "archives")
        shutil.copyfile(root / "autograder" / "source" / "run_autograder", root / "autograder" / "run_autograder")
        os.chmod(root / "autograder" / "run_autograder", 0o755)
        for case, upload in uploads.items():
            for folder in ("submission", "results"):
                shutil.rmtree(root / "autograder" / folder, ignore_errors=True)
                (root / "autograder" / folder).mkdir()
            shutil.copytree(upload, root / "autograder" / "submission", dirs_exist_ok=True)
            start = time.monotonic()
            checked(in_root(root, "/autograder/run_autograder", docker=True, timeout=1800), f"run_autograder ({case})")
            results = json.loads((root / "autograder" / "results" / "results.json").read_text())
            out["cases"][case] = {"seconds": time.monotonic() - start, "score": results["score"],
                                  "isolation": results.get("extra_data", {}).get("isolation"),
                                  "format": format_problems(results), "output": results.get("output", "")}
    return out


def dockerfile_steps(path: Path) -> tuple[str, list[tuple[str, str]]]:
    """(base image, [(instruction, argument)]) of a Dockerfile, continuation lines joined."""
    lines, current = [], ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") and not current:
            continue
        current += raw.rstrip("\\").rstrip() + " " if raw.rstrip().endswith("\\") else raw
        if not raw.rstrip().endswith("\\"):
            if current.strip():
                lines.append(current.strip())
            current = ""
    steps = [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]
    base = next(arg for op, arg in steps if op == "FROM")
    return base, [(op, arg) for op, arg in steps if op != "FROM"]


def copy_step(root: Path, folder: Path, arg: str) -> None:
    """A Dockerfile's `COPY src dest`: a folder's files into dest, a file to dest (into it where it ends in /)."""
    src, dest = arg.split()
    target = root / dest.lstrip("/")
    if (folder / src).is_dir():
        shutil.copytree(folder / src, target, dirs_exist_ok=True)
    else:
        target = target / src if dest.endswith("/") else target
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / src, target)


def run_dockerfile(root: Path, folder: Path, env: dict[str, str], binds: dict[str, str]) -> dict[str, str]:
    """The RUN, COPY, WORKDIR, ENV and ARG steps of folder/Dockerfile in `root` (its base, debian:bookworm-slim, is
    what debootstrap makes); the image's environment (its ENV lines)."""
    image, steps = dockerfile_steps(folder / "Dockerfile")
    if image != "debian:bookworm-slim":
        raise SystemExit(f"platform-check: the Dockerfile starts FROM {image}; this check builds debian:bookworm-slim")
    image_env: dict[str, str] = {}
    args = dict(env)
    workdir = "/"
    for op, arg in steps:
        if op == "COPY":
            copy_step(root, folder, arg)
        elif op == "WORKDIR":
            workdir = arg
        elif op == "ENV":
            key, _, value = arg.partition("=")
            image_env[key] = value.replace("$PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        elif op == "ARG":
            key, _, default = arg.partition("=")
            args.setdefault(key, default)
        elif op == "RUN":
            script = f"mkdir -p {shlex.quote(workdir)} && cd {shlex.quote(workdir)} && {arg}"
            checked(in_root(root, script, env={**args, **image_env}, binds=binds), f"the Dockerfile's RUN {arg[:60]}")
    return image_env


def autolab_job(job: Path, tar_path: Path, makefile: Path, upload: Path) -> None:
    """A fresh job folder as Tango hands it over: the grader's tar, its Makefile and the handin as handin.tar."""
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir()
    shutil.copyfile(tar_path, job / "autograde.tar")
    shutil.copyfile(makefile, job / "Makefile")
    with tarfile.open(job / "handin.tar", "w") as tar:
        for f in sorted(p for p in upload.rglob("*") if p.is_file()):
            if f.name != "handin.tar":
                tar.add(f, arcname=f.name)
                continue
            with tarfile.open(f) as inner:  # the tar case: its members are the handin
                for m in inner.getmembers():
                    tar.addfile(m, inner.extractfile(m))


def autolab_case(root: Path, image_env: dict[str, str], case: str) -> dict:
    """Grade the job in /home/autograde/job as Tango's autodriver does (its default limits): the job's files owned
    by `autograde`, `make` as that user; its time, score, last line and isolation level."""
    script = ("chown -R autograde:autograde /home/autograde/job && cd /home/autograde/job && "
              "su autograde -s /bin/bash -c 'ulimit -u 100 -f 102400; timeout 180 make'")
    start = time.monotonic()
    proc = checked(in_root(root, script, env=image_env, docker=True, timeout=1800), f"Autolab's make ({case})")
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    scores = json.loads(last).get("scores", {}) if last.startswith("{") else {}
    level = next(
        (line.split(":", 1)[1].strip() for line in proc.stdout.splitlines() if line.startswith("Sandbox:")),
        None,
    )
    return {"seconds": time.monotonic() - start, "score": sum(scores.values()), "last": last, "isolation": level}


def autolab(base: Path, uploads: dict[str, Path], wheel: Path | None) -> dict:
    from autograder.platforms.package import build_autolab

    env, binds, how = torch_source(wheel)
    tar_path, makefile = build_autolab(WORK / "autolab", torch_wheel=wheel if "TORCH_WHEEL" in env else None)
    out: dict = {"torch": how, "cases": {}}
    with fresh_copy(base) as root:
        start = time.monotonic()
        image_env = run_dockerfile(root, tar_path.parent, env, binds)
        out["build_s"] = time.monotonic() - start
        out["venv"] = size(root / "opt" / "grader")
        home = root / "home" / "autograde"  # where Tango's autodriver moves a job, to run `make` as `autograde`
        for case, upload in uploads.items():
            autolab_job(home / "job", tar_path, makefile, upload)
            out["cases"][case] = autolab_case(root, image_env, case)
    return out


def pl_format_problems(raw: bytes) -> list[str]:
    """Where a results.json departs from PrairieLearn's (its external-grading docs and processGradingResult)."""
    if len(raw) > 1024 * 1024:
        return [f"{len(raw)} bytes: PrairieLearn drops a results.json over 1 MB"]
    data = json.loads(raw)
    if data.get("gradable", True) is False:
        errors = data.get("format_errors")
        return [] if isinstance(errors, list) and errors and all(isinstance(e, str) for e in errors) else [
            "not gradable without format_errors"]
    score = data.get("score")
    wrong = [] if isinstance(score, (int, float)) and 0 <= score <= 1 else [f"score {score!r} is not in [0, 1]"]
    for t in data.get("tests", []):
        wrong += [f"test {t.get('name')!r} {k}" for k, kind in PL_TEST_KEYS.items() if not isinstance(t.get(k), kind)]
    wrong += [f"image {i}" for i, img in enumerate(data.get("images", []))
              if not str(img.get("url", "")).startswith("data:image/png;base64,")]
    return wrong


def prairielearn(base: Path, uploads: dict[str, Path], wheel: Path | None) -> dict:
    """`make prairielearn`'s image steps in a fresh root, then each upload graded as PrairieLearn's host runs a job:
    /grade laid out, the question's entrypoint run as root with Docker's default capabilities."""
    from autograder.platforms.package import build_prairielearn

    env, binds, how = torch_source(wheel)
    question, folder = build_prairielearn(WORK / "prairielearn", torch_wheel=wheel if "TORCH_WHEEL" in env else None)
    options = json.loads((question / "info.json").read_text())["externalGradingOptions"]
    out: dict = {"torch": how, "cases": {}}
    with fresh_copy(base) as root:
        start = time.monotonic()
        image_env = run_dockerfile(root, folder, env, binds)
        out["build_s"] = time.monotonic() - start
        out["venv"] = size(root / "opt" / "grader")
        for case, upload in uploads.items():
            if case == "reference handin.tar":
                continue  # pl-file-upload takes the handin's files by name
            grade = root / "grade"
            shutil.rmtree(grade, ignore_errors=True)
            for entry in options["serverFilesCourse"]:
                for top in ("serverFilesCourse", "shared"):
                    shutil.copytree(question.parents[1] / "serverFilesCourse" / entry, grade / top / entry)
            shutil.copytree(upload, grade / "student")
            (grade / "data").mkdir()
            (grade / "data" / "data.json").write_text("{}")
            start = time.monotonic()
            proc = checked(in_root(root, f"chmod +x {options['entrypoint'].split()[0]} && {options['entrypoint']}",
                                   env=image_env, docker=True, timeout=options["timeout"]), f"the entrypoint ({case})")
            raw = (grade / "results" / "results.json").read_bytes()
            data = json.loads(raw)
            out["cases"][case] = {
                "seconds": time.monotonic() - start, "score": data.get("score"), "gradable": data.get("gradable"),
                "isolation": "fallback" if "Sandbox: fallback" in str(data.get("output")) else proc.stderr[-200:],
                "format": pl_format_problems(raw), "said": (data.get("format_errors") or [""])[0][:100]}
    return out


def report(name: str, found: dict) -> None:
    say(f"{name}: torch from {found['torch']}")
    if "setup_s" in found:
        say(
            f"{name}: setup.sh {found['setup_s']:.0f} s; /autograder/venv {found['venv']}, "
            f"apt's downloads {found['apt']}"
        )
    if "build_s" in found:
        say(f"{name}: the Dockerfile's steps {found['build_s']:.0f} s; /opt/grader {found['venv']}")
    for case, c in found["cases"].items():
        extra = (f"; format: {'conforms' if not c['format'] else '; '.join(c['format'])}" if "format" in c else
                 f"; last line {c['last'][:100]}")
        if c.get("gradable") is False:
            say(f"{name}: {case}: not gradable ({c['said']}) in {c['seconds']:.0f} s{extra}")
            continue
        what = f"score {c['score']:.4f}" if "gradable" in c else f"{c['score']:g} points"
        say(f"{name}: {case}: {what} in {c['seconds']:.0f} s at the {c['isolation']} level{extra}")


PLATFORMS = {"gradescope": ("Gradescope", gradescope), "autolab": ("Autolab", autolab),
             "prairielearn": ("PrairieLearn", prairielearn)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.platforms.check", description=__doc__.splitlines()[0])
    ap.add_argument("--platform", choices=(*PLATFORMS, "all"), default="all")
    default_wheel = next(
        iter(sorted(Path(os.environ.get("PIP_FIND_LINKS", "/nonexistent")).glob("torch-*+cpu-cp311-*.whl"))), None
    )
    ap.add_argument("--torch-wheel", type=Path, default=default_wheel,
                    help="a CPU wheel of the pinned torch for Debian 12's Python 3.11, used where PyTorch's index "
                         "is unreachable (default: one in PIP_FIND_LINKS)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        print("platform-check: skipped: it needs root on Linux (debootstrap, mounts, chroot)")
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    base = base_root()
    with tempfile.TemporaryDirectory(prefix="uploads-", dir=WORK) as tmp:
        uploads = handins(Path(tmp))
        found = {}
        for key, (name, flow) in PLATFORMS.items():
            if args.platform in (key, "all"):
                found[key] = flow(base, uploads, args.torch_wheel)
                report(name, found[key])
    (WORK / "figures.json").write_text(json.dumps(found, indent=1))
    full = sum(p.points for p in rubric.load().values())  # the reference's score: the rubric's total
    bad = []
    for p, f in found.items():
        for case, c in f["cases"].items():
            wanted = (1.0 if p == "prairielearn" else full) if case.startswith("reference") else None
            if wanted is not None and (c.get("score") is None or abs(c["score"] - wanted) > 1e-6):
                bad.append(f"{p} {case}: {c.get('score')}")
            if c.get("format"):
                bad.append(f"{p} {case}: results.json {c['format']}")
            if p == "prairielearn" and case == "broken" and c.get("gradable") is not False:
                bad.append(f"{p} {case}: graded, where make handin refuses its files")
    if bad:
        say("FAILED: " + "; ".join(bad))
        return 1
    say("all platforms grade the reference to full marks, and every results.json conforms")
    return 0

if __name__ == "__main__":
    sys.exit(main())


