"""`make handin runid=<id> epoch=<n>`: check every handin file the way the grader will read it, and pack handin.tar
only when every file passes, else say what to fix. The files, shapes and caps: gradelib/handin_contract.py."""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from . import handin_contract as contract
from . import safeio
from .handin_contract import HANDIN_FILES, MAX_FILE_BYTES, OPTIONAL, RUN_FILES
from .lm.vocab import VOCAB_SIZE
from .problems.generation import check_ids
from .problems.lm_common import QUALITY_LINES, load_npy
from .safeio import SafeReadError


def sources(runid: str, epoch: str) -> dict[str, str]:
    """Handin name -> where it lives in the handout folder for this experiment and epoch."""
    run = f"experiments/{runid}"
    return {**{name: name for name in HANDIN_FILES if name not in contract.RUN_FILES},  # the code and notebooks
            "predictions.npy": f"{run}/predictions_test_{epoch}.npy", "generated.npy": f"{run}/generated_{epoch}.npy",
            "generated.txt": f"{run}/generated_{epoch}.txt", "model.pt": f"{run}/model_{epoch}.pt"}


def runs(root: Path) -> dict[str, list[int]]:
    """experiments/<runid> -> the epochs with a checkpoint, newest run first."""
    found = {}
    folders = [p for p in (root / "experiments").glob("*") if p.is_dir()]
    for folder in sorted(folders, key=lambda p: (p.stat().st_mtime, p.name), reverse=True):
        epochs = sorted(int(m.stem.removeprefix("model_")) for m in folder.glob("model_*.pt")
                        if m.stem.removeprefix("model_").isdigit())
        if epochs:
            found[folder.name] = epochs
    return found


def short_run(runid: str) -> int | None:
    """The step cap of a short run (MAX_STEPS, or LM_TRAIN_STEPS for a quick try), None for a full one."""
    match = re.search(r"-steps(\d+)$", runid)  # notebook 3 names a run cut short <time>-steps<N>
    return int(match.group(1)) if match else None


def runs_text(root: Path) -> str:
    """One line saying which trained runs (and epochs) experiments/ under `root` holds."""
    found = runs(root)
    if not found:
        return "experiments/ holds no trained run yet: train in notebook 3 first"
    said = [f"runid={r} (epoch{'s' if len(e) > 1 else ''} {', '.join(map(str, e))}"
            + (f", a short run of {short_run(r)} steps)" if short_run(r) is not None else ")")
            for r, e in found.items()]
    return "experiments/ holds: " + "; ".join(said)


def best_full_run(root: Path, notes: list[str]) -> tuple[str, str]:
    """(runid, epoch) of the newest full (not short) run whose metrics.json names the validation NLL of an epoch it
    has a checkpoint for, at the epoch where that NLL is lowest, said in `notes`; ('', '') when there is none."""
    for runid, epochs in runs(root).items():
        if short_run(runid) is not None:
            continue
        try:
            history = json.loads((root / "experiments" / runid / "metrics.json").read_text())
            scored = {int(e): float(v) for e, v in zip(history["epoch"], history["val_nll"])}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        scored = {e: v for e, v in scored.items() if e in epochs and v == v}  # (v == v: not NaN)
        if scored:
            best = min(scored, key=lambda e: (scored[e], -e))
            notes.append(f"no runid/epoch given: handing in the newest full run, runid={runid}, at its best "
                         f"validation epoch, epoch={best} (validation NLL {scored[best]:.4f}); name others with "
                         "`make handin runid=<id> epoch=<n>`")
            return runid, str(best)
    return "", ""


TODO_RAISE = re.compile(r"""raise\s+NotImplementedError\(\s*(?:f?["'])(TODO[^"'\n]*)""")


def todos(path: Path) -> list[str]:
    """The TODO messages a handin file still raises (code cells only, for a notebook)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".ipynb":
            cells = json.loads(text).get("cells", [])
            text = "\n".join("".join(c.get("source", "")) for c in cells
                             if isinstance(c, dict) and c.get("cell_type") == "code")
    except (OSError, ValueError, AttributeError):
        return []
    return list(dict.fromkeys(m.group(1).strip() for m in TODO_RAISE.finditer(text)))


def _check_python(data: bytes) -> list[str]:
    try:
        ast.parse(data)
    except SyntaxError as exc:
        return [f"does not parse: line {exc.lineno}: {safeio.clean_text(exc.msg)}; fix it and run "
                "`python autograder.py`"]
    except ValueError as exc:  # e.g. NUL bytes
        return [f"is not Python source ({safeio.clean_text(exc)})"]
    return []


def _check_notebook(data: bytes) -> list[str]:
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return [f"is not a notebook (not JSON: {safeio.clean_text(exc)[:200]}); save it from Jupyter and do not "
                "edit it by hand"]
    if isinstance(notebook, dict) and isinstance(notebook.get("cells"), list):  # the grader runs its code cells
        return []
    return ["is not a valid notebook (no list of cells); open it in Jupyter, fix it and save it"]


# Handin array -> (problem, shape, dtype kinds, what it holds), read and checked as that problem's grader does.
ARRAYS = {"predictions.npy": ("prediction", contract.PREDICTION_SHAPE, "f", "raw logits of predict(inp, 20) for the "
                              f"128 sequences of prediction_test.npz, one per vocabulary token ({VOCAB_SIZE})"),
          "generated.npy": ("generation", contract.GENERATION_SHAPE, "iu",
                            "generate(inp, 30) for the 128 prompts of generation_test.npz")}


def _check_array(name: str, path: Path) -> list[str]:
    pid, shape, kinds, what = ARRAYS[name]
    arr, said = load_npy(pid, path, shape, kinds, what)
    if arr is not None and pid == "generation":
        said = check_ids(arr)
    for prefix in (f"{pid}: {path.name} ", f"{pid}: {name} "):  # the grader's words, less the file (said by collect)
        said = said.removeprefix(prefix)
    return [said] if said else []


def _check_checkpoint(name: str, path: Path) -> list[str]:
    if too_large := contract.checkpoint_size_problem(path.stat().st_size):  # the cap the grader enforces, in its words
        return [too_large]
    try:
        with zipfile.ZipFile(path) as zf:
            if any(("/" + n).endswith("/data.pkl") for n in zf.namelist()):
                return []
    except (zipfile.BadZipFile, OSError):
        pass
    return ["is not a torch.save checkpoint (no data.pkl inside); save the model with torch.save"]


TEXT_CHECKS = {".py": _check_python, ".ipynb": _check_notebook}  # of the file's bytes
CHECKS = {"predictions.npy": _check_array, "generated.npy": _check_array, "model.pt": _check_checkpoint}


def check_file(name: str, path: Path) -> list[str]:
    """What is wrong with handin file `name` stored at `path` (empty when nothing)."""
    try:
        if safeio.stat_regular(path).st_size > MAX_FILE_BYTES:
            return [f"is larger than {MAX_FILE_BYTES // 2**20} MB, the most the grader accepts for one file"]
        suffix = Path(name).suffix
        if suffix in TEXT_CHECKS:
            return TEXT_CHECKS[suffix](safeio.read_bytes(path, MAX_FILE_BYTES))
    except SafeReadError as exc:
        return [exc.detail]
    return CHECKS[name](name, path) if name in CHECKS else []


def check_folder(folder: Path) -> dict[str, list[str]]:
    """Problems of every handin file in an unpacked handin (missing optional files are fine)."""
    return {name: check_file(name, folder / name) for name in HANDIN_FILES
            if name not in OPTIONAL or os.path.lexists(folder / name)}


@dataclass
class Packed:
    files: dict[str, Path]  # handin name -> source path, in HANDIN_FILES order
    problems: list[str]  # what to fix; empty when the handin may be written
    notes: list[str]  # things worth knowing that do not block the handin
    refused: dict[str, Path] = field(default_factory=dict)  # present but failing its check (a syntax error, ...)


def collect(root: Path, runid: str, epoch: str, partial: bool = False) -> Packed:
    """Pick and check the files of a handin from the handout folder `root`."""
    packed = Packed({}, [], [])
    problems = packed.problems
    if not runid and not epoch and not partial:
        runid, epoch = best_full_run(root, packed.notes)
    have_run = bool(runid and epoch)
    if not have_run and not partial:
        problems.append("runid= and epoch= are required: `make handin runid=<experiment folder> epoch=<n>` hands in "
                        "experiments/<runid>/predictions_test_<n>.npy and generated_<n>.npy; "
                        f"`make handin partial=1` hands in the other files without them; {runs_text(root)}")
    # A run or an epoch of which nothing exists is said once, with the runs that do, not once per file of it.
    no_epoch = have_run and not partial and not any((root / sources(runid, epoch)[n]).exists() for n in RUN_FILES)
    if no_epoch:
        what = (f"experiments/{runid} has nothing for epoch {epoch}" if (root / "experiments" / runid).is_dir()
                else f"there is no experiments/{runid}")
        problems.append(f"{what}, so predictions.npy, generated.npy and model.pt cannot be packed; {runs_text(root)}")
    for name, rel in sources(runid or "<runid>", epoch or "<epoch>").items():
        if not rel.startswith("experiments/") or (have_run and not no_epoch):
            take(packed, root, name, rel, partial)
        elif partial and name not in OPTIONAL:
            packed.notes.append(f"{name}: no runid/epoch given; handed in without it (it scores 0)")
    if have_run and not no_epoch and short_run(runid) is not None:
        packed.notes.append(short_run_cost(runid))
    total = sum(p.stat().st_size for p in packed.files.values())
    if total > contract.MAX_TOTAL_BYTES:
        problems.append(f"the handin would hold {total / 2**20:.0f} MB; the grader accepts at most "
                        f"{contract.MAX_TOTAL_BYTES // 2**20} MB")
    return packed


def take(out: Packed, root: Path, name: str, rel: str, partial: bool) -> None:
    """Pack handin file `name` from `rel` under `root` if it passes its check, else say why in `out`."""
    path = (root / rel).resolve()  # a link in the student's own folder is theirs to make: pack what it points to
    found = check_file(name, path) if path.exists() else None
    if found is None and (name in OPTIONAL or partial):
        out.notes.append(f"{name}: {rel} not found; " + ("it is optional and left out" if name in OPTIONAL
                                                         else "handed in without it (it scores 0)"))
    elif found is None:
        where = f"; {runs_text(root)}" if rel.startswith("experiments/") else ""
        out.problems.append(f"{name}: {rel} is missing ({HANDIN_FILES[name]}){where}")
    elif found and name in OPTIONAL:
        out.notes.extend(f"{name} (from {rel}) {p}; it is optional and left out" for p in found)
    elif found:
        out.problems.extend(f"{name} (from {rel}) {p}" for p in found)
        out.refused[name] = path
    else:
        out.files[name] = path
        left = todos(path) if path.suffix in (".py", ".ipynb") else []
        if left:
            shown = "; ".join(left[:4]) + (f"; and {len(left) - 4} more" if len(left) > 4 else "")
            out.notes.append(f"{name} still raises NotImplementedError for {len(left)} TODO(s), which score 0: {shown}")


def short_run_cost(runid: str) -> str:
    """What handing in a short run (MAX_STEPS, or a quick LM_TRAIN_STEPS try) costs, in the rubric's points."""
    from .rubric import load

    problems = load()
    at_stake = sum(g.points for pid, line in QUALITY_LINES.items() for g in problems[pid].groups if g.id == line)
    course = sum(p.points for p in problems.values())
    return (f"experiments/{runid} is a short run of {short_run(runid)} steps: its model earns few or none of the "
            f"{at_stake:g} of {course:g} points of the model-quality lines (prediction NLL and generation perplexity, "
            "graded on hidden targets); hand in a full run's epoch to earn them (`python autograder.py --runid "
            f"{runid}` shows where its validation NLL falls against the thresholds)")


def write_tar(files: dict[str, Path], out: Path) -> None:
    """Write files at the top level of a plain tar, byte-identical for identical inputs."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    if hasattr(os, "fchmod"):  # (Windows before Python 3.13 has none, nor modes to set)
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; an upload page or a TA may need to read it
    try:
        with os.fdopen(fd, "wb") as fh, tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, path in files.items():
                data = safeio.read_bytes(path, MAX_FILE_BYTES)
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    """`make handin`: check the handout folder and pack handin.tar; the exit status (0: packed)."""
    ap = argparse.ArgumentParser(prog="make handin", description="Check and pack handin.tar.")
    ap.add_argument("--runid", default="", help="experiment folder under experiments/")
    ap.add_argument("--epoch", default="", help="epoch whose predictions and generations to hand in")
    ap.add_argument("--out", type=Path, default=Path("handin.tar"))
    ap.add_argument("--root", type=Path, default=Path("."), help="the handout folder")
    ap.add_argument("--partial", action="store_true", help="hand in what exists; missing files score 0")
    args = ap.parse_args(argv)
    packed = collect(args.root, args.runid.strip(), args.epoch.strip(), args.partial)
    for note in packed.notes:
        print(f"note: {note}")
    if packed.problems:
        print(f"{args.out} was NOT written. Fix these and run `make handin` again:", file=sys.stderr)
        for problem in packed.problems:
            print(f"  - {problem}", file=sys.stderr)
        if args.out.is_file():  # an earlier one is not this one: renamed, so it is not uploaded for it
            os.replace(args.out, earlier := args.out.with_name(f"{args.out.stem}.earlier{args.out.suffix}"))
            print(f"The {args.out.name} of an earlier `make handin` is now {earlier.name}: it is not what you asked "
                  "for.", file=sys.stderr)
        return 1
    write_tar(packed.files, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB): {', '.join(packed.files)}")
    print(f"Check it the way the grader reads it: python autograder.py --handin {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
