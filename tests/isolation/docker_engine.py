"""A real Docker engine for tests/isolation/test_container.py, where one can be had; no registry is needed.

`start()` uses an engine that answers already, else (as root) starts `dockerd` with no flags, installing
Debian's docker.io and debootstrap first where they are missing. A daemon it started runs in its own process
group with its output in a log file (never the test run's output) and is stopped by `Engine.stop()`.

Images, each built once and kept by the engine under a tag keyed by what went into it (a later run reuses it):
- the base: a Debian 12 minbase root made by debootstrap, cached as a tar under CACHE (keyed by the recipe),
  and `docker import`ed;
- Gradescope's: the base after the zip's setup.sh (as Gradescope builds its image: as root, with network);
- Autolab's: `make autolab`'s Dockerfile built offline (a local CPU torch wheel and the other wheels beside it,
  no package index), with a stand-in for Tango's autodriver (tests/isolation/autodriver_standin.c), FROM the base;
- PrairieLearn's: `make prairielearn`'s Dockerfile built offline the same way, FROM the base.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from support import REPO

CACHE = Path(os.environ.get("GRADER_TEST_CACHE") or "/var/cache/attention-grader-tests")
DEBOOTSTRAP = ("debootstrap", "--variant=minbase", "bookworm")
MIRROR = "http://deb.debian.org/debian"
TANGO_COMMAND = ("cp -r mount/* autolab/; su autolab -c \"autodriver -u 100 -f 104857600 -t 180 -o 1024000 autolab "
                 "> output/feedback 2>&1\"; cp output/feedback mount/feedback")  # Tango's, verbatim; cwd /home


def _key(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


class Engine:
    """`engine(*args)` runs the docker client; `stop()` ends a daemon this module started."""

    def __init__(self, daemon: subprocess.Popen | None = None, log: Path | None = None):
        self.daemon, self.log = daemon, log

    def __call__(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise AssertionError(f"docker {' '.join(args[:3])} ... failed ({proc.returncode}):\n"
                                 f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def has_image(self, tag: str) -> bool:
        return self("image", "inspect", tag, check=False, timeout=60).returncode == 0

    def stop(self) -> None:
        if self.daemon is None or self.daemon.poll() is not None:
            return
        try:
            os.killpg(self.daemon.pid, signal.SIGTERM)
            self.daemon.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.daemon.pid, signal.SIGKILL)
            self.daemon.wait()
        except ProcessLookupError:
            pass


def _answers() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def start() -> tuple[Engine | None, str]:
    """(an engine, '') or (None, why none can be had here)."""
    if os.environ.get("GRADER_TEST_DOCKER") == "0":
        return None, "GRADER_TEST_DOCKER=0"
    if not sys.platform.startswith("linux"):
        return None, "not Linux"
    if shutil.which("docker") and _answers():
        return Engine(), ""
    if os.geteuid() != 0:
        return None, "no Docker engine answers, and starting one needs root"
    if not (shutil.which("dockerd") and shutil.which("docker") and shutil.which("debootstrap")):
        if not shutil.which("apt-get"):
            return None, "dockerd or debootstrap is missing and there is no apt-get to install them"
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-qq", "docker.io", "debootstrap"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=600)
        if not (shutil.which("dockerd") and shutil.which("docker") and shutil.which("debootstrap")):
            return None, "apt-get could not install docker.io and debootstrap"
    CACHE.mkdir(parents=True, exist_ok=True)
    log = CACHE / "dockerd.log"
    with open(log, "ab") as out:
        daemon = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
    engine = Engine(daemon, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and daemon.poll() is None:
        if _answers():
            return engine, ""
        time.sleep(0.5)
    engine.stop()
    tail = log.read_text(errors="replace")[-500:] if log.is_file() else ""
    return None, f"dockerd did not start (its log, {log}, ends: {tail!r})"


def base_image(engine: Engine) -> str:
    """Debian 12 minbase, from debootstrap (the root's tar is cached under CACHE, keyed by the recipe)."""
    key = _key(*DEBOOTSTRAP, MIRROR)
    tag = f"attention-grader-test/debian12:{key}"
    if engine.has_image(tag):
        return tag
    CACHE.mkdir(parents=True, exist_ok=True)
    tar = CACHE / f"debian12-minbase-{key}.tar"
    if not tar.is_file():
        root = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=CACHE))
        try:
            subprocess.run([*DEBOOTSTRAP, str(root), MIRROR], check=True, capture_output=True, timeout=1800)
            subprocess.run(["tar", "-C", str(root), "-cf", f"{tar}.part", "."], check=True, timeout=600)
            os.replace(f"{tar}.part", tar)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    engine("import", str(tar), tag, timeout=600)
    return tag


def host_ca() -> list[str]:
    """docker run options that let pip in a container trust what pip on this host trusts (a proxy's own CA)."""
    cert = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    return ["-v", f"{cert}:/host-ca/ca.crt:ro", "-e", "PIP_CERT=/host-ca/ca.crt"] if Path(cert).is_file() else []


def torch_wheel() -> Path | None:
    """A local CPU wheel of the pinned torch for Debian 12's Python 3.11 (TORCH_WHEEL, or one in PIP_FIND_LINKS)."""
    given = os.environ.get("TORCH_WHEEL")
    if given and Path(given).is_file():
        return Path(given)
    pin = re.search(r"^torch==(\S+)", (REPO / "requirements-grading.txt").read_text(), re.M).group(1)
    for folder in (os.environ.get("PIP_FIND_LINKS") or "").split():
        found = sorted(Path(folder).glob(f"torch-{pin}+cpu-cp311-*.whl"))
        if found:
            return found[0]
    return None


def gradescope_image(engine: Engine, base: str, wheel: Path) -> str:
    """The base after setup.sh, as Gradescope builds its image (the zip's files at /autograder/source, setup.sh run
    there as root with network), then the current zip's files in place of the ones setup.sh saw, made root's
    alone as setup.sh makes them: setup.sh runs again only when what it installs from changes (its own text,
    requirements-grading.txt, the wheel), not for each change of the grader."""
    from autograder.platforms.package import build_gradescope

    with tempfile.TemporaryDirectory() as tmp:
        package = build_gradescope(Path(tmp))
        source = Path(tmp) / "source"
        with zipfile.ZipFile(package) as z:
            z.extractall(source)
        inputs = [(source / name).read_bytes() for name in ("setup.sh", "requirements-grading.txt")]
        set_up = f"attention-grader-test/gradescope-setup:{_key(base, *inputs, wheel.name)}"
        tag = f"attention-grader-test/gradescope:{_key(set_up, package.read_bytes())}"
        if engine.has_image(tag):
            return tag
        install = ("cd /autograder/source && chmod 755 setup.sh run_autograder && bash ./setup.sh "
                   "&& cp run_autograder /autograder/run_autograder")
        steps = [] if engine.has_image(set_up) else [(base, set_up, install)]
        steps.append((set_up, tag, "rm -rf /autograder/source && cp -r /package /autograder/source "
                                   "&& chmod -R go-rwx /autograder/source && cp /package/run_autograder /autograder/"))
        for image, result, script in steps:
            name = f"gradescope-setup-{os.getpid()}"
            try:
                engine(
                    "run",
                    "--name",
                    name,
                    "--network",
                    "host",
                    "-v",
                    f"{source}:/package:ro",
                    "-v",
                    f"{wheel.parent}:/wheels:ro",
                    "-e",
                    f"TORCH_WHEEL=/wheels/{wheel.name}",
                    *host_ca(),
                    image,
                    "bash",
                    "-c",
                    f"mkdir -p /autograder; [ -d /autograder/source ] || cp -r /package /autograder/source; {script}",
                    timeout=1800,
                )
                engine("commit", name, result, timeout=600)
            finally:
                engine("rm", "-f", name, check=False)
    return tag


def _wheelhouse(wheel: Path) -> Path:
    """The wheels the grading requirements need besides torch, for Debian 12's Python (pip download, cached)."""
    reqs = [
        line for line in (REPO / "requirements-grading.txt").read_text().splitlines() if not line.startswith("torch==")
    ]
    folder = CACHE / f"wheels-{_key(*reqs, wheel.name)}"
    if not (folder / ".complete").is_file():
        listed = folder.with_suffix(".txt")
        listed.write_text("\n".join(reqs) + "\n")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(folder), "--only-binary=:all:",
                        "--python-version", "3.11", "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", str(wheel),
                        "-r", str(listed)], check=True, capture_output=True, timeout=900)
        (folder / ".complete").write_text("")
    return folder


def _offline_image(engine: Engine, base: str, wheel: Path, out: Path, kind: str, *inputs: bytes) -> str:
    """The image of the build folder `out` (`make autolab`'s or `make prairielearn`'s: a Dockerfile FROM
    debian:bookworm-slim, install-grader.sh, the requirements, wheels/ with the CPU torch wheel), built offline
    FROM the base (the Dockerfile's FROM line is the only change) with every other wheel beside torch's; tagged by
    what the build reads (`inputs`: other files it copies)."""
    for w in _wheelhouse(wheel).glob("*.whl"):
        if not (out / "wheels" / w.name).exists():
            os.link(w, out / "wheels" / w.name) if w.stat().st_dev == out.stat().st_dev else shutil.copy(
                w, out / "wheels"
            )
    dockerfile = out / "Dockerfile"
    text = dockerfile.read_text()
    assert "\nFROM debian:bookworm-slim\n" in text, "the Dockerfile's base changed: update this test"
    dockerfile.write_text(text.replace("\nFROM debian:bookworm-slim\n", f"\nFROM {base}\n"))
    # The images hold no grader (each job brings it): only what the build reads counts.
    key = _key(base, dockerfile.read_bytes(), (out / "requirements-grading.txt").read_bytes(),
               (out / "install-grader.sh").read_bytes(), *inputs, *sorted(os.listdir(out / "wheels")))
    tag = f"attention-grader-test/{kind}:{key}"
    if not engine.has_image(tag):
        engine("build", "-q", "--network", "host", "--build-arg", "PIP_NO_INDEX=1", "-t", tag, str(out), timeout=1800)
    return tag


def autolab_image(engine: Engine, base: str, wheel: Path) -> str:
    """`make autolab`'s image, built offline FROM the base, with a stand-in for Tango's autodriver."""
    from autograder.platforms.package import build_autolab

    CACHE.mkdir(parents=True, exist_ok=True)
    driver = CACHE / "autodriver-standin"
    source = REPO / "tests" / "isolation" / "autodriver_standin.c"
    if not driver.is_file() or driver.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["cc", "-O2", "-static", "-o", str(driver), str(source)], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        build_autolab(Path(tmp), torch_wheel=wheel, autodriver=driver)
        return _offline_image(engine, base, wheel, Path(tmp), "autolab", driver.read_bytes())


def prairielearn_image(engine: Engine, base: str, wheel: Path) -> str:
    """`make prairielearn`'s image, built offline FROM the base."""
    from autograder.platforms.package import build_prairielearn

    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _, folder = build_prairielearn(Path(tmp), torch_wheel=wheel)
        return _offline_image(engine, base, wheel, folder, "prairielearn")
