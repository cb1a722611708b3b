"""What a measurement records beside its figures (host, CPU, load, date), and the test suite's time as data.

`make bench`, `make mutants` and `make test` write their figures as JSON with this record; a committed copy in
docs/data/ is what the figures page shows (autograder/tools/docs_figures.py builds it).

    python -m autograder.tools.measured suite build/test_times.jsonl [--out docs/data/suite.json]

reads the JSON lines `TEST_FILE_TIMES` (tests/conftest.py) wrote for one run of the suite and writes its summary:
wall time, CPU time, tests by outcome, the longest files.

    python -m autograder.tools.measured mutants build/mutants*.json [--out docs/data/mutants.json]

keeps of `make mutants`' reports what the figures page shows: per problem, the mutants found and graded, the
verdicts, and the run that graded them (its host, date and seconds).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS_DATA = REPO / "docs" / "data"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


class LoadPeak:
    """The highest 1-minute load average seen while a measurement runs: a thread reads it every 5 s."""

    def __init__(self) -> None:
        self.peak, self._done = os.getloadavg()[0], threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self._done.wait(5.0):
            self.peak = max(self.peak, os.getloadavg()[0])

    def stop(self) -> float:
        self._done.set()
        return round(max(self.peak, os.getloadavg()[0]), 2)


def host_record(command: str, load_start: tuple[float, ...] | None = None, load_peak: float | None = None) -> dict:
    """The host and the moment: date (UTC), host name, CPU model and count, load averages (at the start, the highest
    seen in between, at the end), priority, Python, commit."""
    load = [round(x, 2) for x in os.getloadavg()]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "load_start": [round(x, 2) for x in load_start] if load_start else load,
        "load_end": load,
        **({"load_peak": load_peak} if load_peak is not None else {}),
        "nice": os.nice(0),  # the measurement's priority: above 0 it yielded to other work, below it went first
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "commit": commit(),
        "command": command,
    }


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=float) + "\n")


def suite_summary(lines: list[dict], longest: int = 8) -> dict:
    """One run's TEST_FILE_TIMES lines -> wall clock (the session's, collection included), CPU-seconds of the test
    files, tests by outcome, the longest files."""
    session = {r["session"]: r for r in lines if "session" in r}
    lines = [r for r in lines if "file" in r]
    if not lines:
        raise ValueError("no test file was timed")
    per_file: dict[str, dict] = {}
    for r in lines:
        f = per_file.setdefault(r["file"], {"file": r["file"], "wall_s": 0.0, "cpu_s": 0.0})
        f["wall_s"] += r["end"] - r["start"]
        f["cpu_s"] += r["cpu_s"]
        for outcome, n in r.get("outcomes", {}).items():
            f.setdefault("outcomes", {})[outcome] = f.get("outcomes", {}).get(outcome, 0) + n
    outcomes: dict[str, int] = {}
    for f in per_file.values():
        for outcome, n in f.get("outcomes", {}).items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n
    ranked = sorted(per_file.values(), key=lambda f: -f["wall_s"])
    start = session["start"]["time"] if "start" in session else min(r["start"] for r in lines)
    end = session["end"]["time"] if "end" in session else max(r["end"] for r in lines)
    return {
        "wall_s": round(end - start, 1),
        "load_start": session["start"]["load"] if "start" in session else None,
        "load_peak": round(max((r["load"][0] for r in [*lines, *session.values()] if "load" in r), default=0.0), 2)
        or None,
        "cpu_s": round(sum(r["cpu_s"] for r in lines), 1),
        "workers": len({r["worker"] for r in lines}),
        "files": len(per_file),
        "tests": outcomes,
        "longest": [{**f, "wall_s": round(f["wall_s"], 1), "cpu_s": round(f["cpu_s"], 1)} for f in ranked[:longest]],
    }


def mutants_summary(reports: list[dict]) -> dict:
    """`make mutants`' reports -> per problem its mutants found, its verdicts and the run that graded it; from
    mutants_checks' reports, per problem how many killed mutants fail their own question's check first."""
    runs, problems, checks = [], {}, {}
    for report in reports:
        runs.append({k: report[k] for k in ("recorded", "seconds")})
        for pid, summary in report.get("summary", {}).items():
            problems[pid] = {"found": report["found"][pid], **summary, "run": len(runs) - 1}
        for pid, counts in report.get("checks", {}).items():
            checks[pid] = {**counts, "run": len(runs) - 1}
    return {"runs": runs, "problems": problems, **({"checks": checks} if checks else {})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The suite's time and the mutants' verdicts, as the figures page's data.")
    ap.add_argument("what", choices=["suite", "mutants"])
    ap.add_argument("inputs", type=Path, nargs="+",
                    help="suite: the JSON lines TEST_FILE_TIMES wrote for one run; mutants: make mutants' reports")
    ap.add_argument("--out", type=Path, help="default: docs/data/suite.json or docs/data/mutants.json")
    ap.add_argument("--command", default="make test", help="suite: what ran it (recorded with the figures)")
    args = ap.parse_args(argv)
    out = args.out or DOCS_DATA / f"{args.what}.json"
    try:
        if args.what == "mutants":
            data = mutants_summary([json.loads(path.read_text()) for path in args.inputs])
            said = f"{sum(p['mutants'] for p in data['problems'].values())} mutants graded, " \
                   f"{sum(c['own_check_of'] for c in data.get('checks', {}).values())} through the checks"
        else:
            lines = [json.loads(line) for path in args.inputs for line in path.read_text().splitlines() if line.strip()]
            summary = suite_summary(lines)
            loads = summary.pop("load_start"), summary.pop("load_peak")
            data = {"recorded": host_record(args.command, *loads), **summary}
            said = f"the suite took {data['wall_s']:.0f} s, {data['cpu_s']:.0f} CPU-s, tests {data['tests']}"
    except (OSError, ValueError, KeyError) as exc:
        print(f"measured: cannot read {' '.join(map(str, args.inputs))}: {exc!r}", file=sys.stderr)
        return 1
    write(out, data)
    print(f"measured: {said} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
