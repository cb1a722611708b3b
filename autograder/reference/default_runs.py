"""How long notebook 3's default run must be: runs of its default settings, each epoch scored as the course grader does.

    python -m autograder.reference.default_runs train --seed N --out DIR [--epochs E]
    python -m autograder.reference.default_runs write DIR... [--reference] [--lm-dir fixtures/lm]

`train` runs the solution notebook's own cells (solutions/03_language_model.ipynb: its data, model, thread choice,
estimate and training loop, up to the plots) in DIR, with SEED = N (and EPOCHS = E), and scores every epoch's
files: the validation NLL the notebook prints, and the oracle's perplexity of its greedy generations (what the
course grader scores, which the handout cannot). It writes DIR/result.json: the figures per epoch, the wall and
CPU seconds of the run, the load averages at its start and end, and its train.log (the thread choice, the estimate
after 20 steps). `write` gathers the results into <lm-dir>/default_runs.json, which `make handout` ships with the
data: notebook 3 shows, after each epoch, what these runs had, and its text says when they first earned full credit
on both quality lines. --reference adds the reference run (reference_model.json) as seed 0 when it trained the
default settings for the notebook's epochs (train.py's STEPS, the same schedule).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import time
from dataclasses import asdict
from pathlib import Path

from . import provenance

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "solutions" / "03_language_model.ipynb"


def notebook_settings() -> dict:
    """The notebook's default EPOCHS and SEED, read from its CONFIG cell."""
    cell = next("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]
                if "".join(c["source"]).startswith("CONFIG = "))
    return {k: int(re.search(rf"^{k} = (\d+)", cell, re.MULTILINE).group(1)) for k in ("EPOCHS", "SEED")}


def threads_of(train_log: str) -> int | None:
    """The thread count a run kept, from its train.log (None on a GPU)."""
    found = re.search(r"^[\d,]+ parameters, (\d+) thread", train_log, re.MULTILINE)
    return int(found.group(1)) if found else None


def train(seed: int, out: Path, epochs: int | None = None, lm_dir: Path = REPO / "fixtures" / "lm") -> dict:
    """One run of the notebook's cells in `out` (its data/lm a link to `lm_dir`), every epoch scored."""
    import numpy as np

    from ..grading import rubric_check as rubric
    from ..oracle.metrics import generation_perplexity
    from ..oracle.oracles import load_oracle

    epochs = epochs or notebook_settings()["EPOCHS"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "data").mkdir(exist_ok=True)
    if not (out / "data" / "lm").exists():
        (out / "data" / "lm").symlink_to(lm_dir.resolve(), target_is_directory=True)
    cwd, start, load = Path.cwd(), time.time(), os.getloadavg()
    os.chdir(out)
    sys.path.insert(0, str(REPO))
    import matplotlib

    matplotlib.use("Agg")
    namespace: dict = {"__name__": "__main__"}
    try:
        for cell in json.loads(NOTEBOOK.read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] != "code" or text.startswith('""" # BEGIN TEST CONFIG'):
                continue
            if "import matplotlib.pyplot" in text:  # the plots and what follows: not the run
                break
            if text.startswith("CONFIG = "):
                text = re.sub(r"^SEED = \d+", f"SEED = {seed}", text, flags=re.MULTILINE)
                text = re.sub(r"^EPOCHS = \d+", f"EPOCHS = {epochs}", text, flags=re.MULTILINE)
            exec(compile(text, NOTEBOOK.name, "exec"), namespace)  # the course's own notebook
    finally:
        os.chdir(cwd)
    usage, wall = resource.getrusage(resource.RUSAGE_SELF), time.time() - start  # the cells' (scoring not counted)
    run = out / "experiments" / namespace["runid"]
    eps = float(rubric.load()["generation"].settings["smoothing_eps"])
    oracle, gen_inp = load_oracle(lm_dir, eps), np.load(lm_dir / "generation_test.npz")["inp"]
    rows = [{"epoch": e, "val_nll": nll,
             "generation_perplexity": generation_perplexity(oracle, gen_inp, np.load(run / f"generated_{e}.npy"), eps)}
            for e, nll in zip(namespace["history"]["epoch"], namespace["history"]["val_nll"])]
    log = (run / "train.log").read_text()
    result = {"seed": seed, "epochs": epochs, "corpus_sha256": provenance.corpus_hash(lm_dir),
              "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "threads": threads_of(log),
              "load_start": load, "load_end": os.getloadavg(), "rows": rows, "train_log": log}
    (out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def from_reference(lm_dir: Path) -> dict | None:
    """The reference run as seed 0 of the default settings, when it trained them for the notebook's epochs."""
    from .train import CONFIG, STEPS

    ref = json.loads((lm_dir / "reference_model.json").read_text())
    settings, inputs = notebook_settings(), ref.get("inputs", {})
    steps = inputs.get("steps") or inputs.get("epochs", 0) * (ref["epochs"][-1]["steps"] // ref["epochs"][-1]["epoch"])
    if ref["config"] != asdict(CONFIG) or inputs.get("seed") != settings["SEED"] or steps != STEPS \
            or len(ref["epochs"]) != settings["EPOCHS"] or ref.get("stopped_early"):  # not the default run
        return None
    return {"seed": settings["SEED"], "epochs": settings["EPOCHS"], "corpus_sha256": inputs.get("corpus_sha256"),
            "wall_s": ref["wall_s"], "cpu_s": ref.get("train_cpu_s"), "threads": inputs.get("threads"),
            "source": "reference_model.json",
            "rows": [{"epoch": r["epoch"], "val_nll": r["val_prediction_nll"],
                      "generation_perplexity": r["generation_perplexity"]} for r in ref["epochs"]]}


def write(results: list[dict], lm_dir: Path) -> dict:
    """<lm-dir>/default_runs.json from the runs of this corpus, with the thresholds they are judged by."""
    from ..grading import rubric_check as rubric

    settings = {p: rubric.load()[p].settings for p in ("prediction", "generation")}
    full = (float(settings["prediction"]["full_credit_nll"]), float(settings["generation"]["full_credit_perplexity"]))
    corpus = provenance.corpus_hash(lm_dir)
    runs = sorted((r for r in results if r["corpus_sha256"] == corpus), key=lambda r: r["seed"])
    for r in runs:
        r.setdefault("threads", threads_of(r.get("train_log", "")))
        passing = [row["epoch"] for row in r["rows"] if row["val_nll"] <= full[0] and
                   row["generation_perplexity"] <= full[1]]
        r["first_full_credit"] = passing[0] if passing else None
    data = {"corpus_sha256": corpus, "full_credit": {"val_nll": full[0], "generation_perplexity": full[1]},
            "epochs": notebook_settings()["EPOCHS"], "runs": runs}
    (lm_dir / "default_runs.json").write_text(json.dumps(data, indent=1) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="one run of the notebook's cells, every epoch scored")
    t.add_argument("--seed", type=int, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--epochs", type=int, default=None, help="default: the notebook's EPOCHS")
    w = sub.add_parser("write", help="gather runs into <lm-dir>/default_runs.json")
    w.add_argument("runs", nargs="*", type=Path, help="folders that train wrote (each holds result.json)")
    w.add_argument("--reference", action="store_true", help="add the reference run as seed 0")
    for p in (t, w):
        p.add_argument("--lm-dir", type=Path, default=REPO / "fixtures" / "lm")
    args = ap.parse_args(argv)
    if args.command == "train":
        r = train(args.seed, args.out, args.epochs, args.lm_dir)
        for row in r["rows"]:
            print(f"seed {r['seed']} epoch {row['epoch']}/{r['epochs']}: validation NLL {row['val_nll']:.3f}, "
                  f"generation perplexity {row['generation_perplexity']:.2f}")
        print(f"seed {r['seed']}: {r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} CPU s")
        return 0
    results = [json.loads((d / "result.json").read_text()) for d in args.runs]
    reference = from_reference(args.lm_dir) if args.reference else None
    data = write(results + ([reference] if reference else []), args.lm_dir)
    for r in data["runs"]:
        print(f"seed {r['seed']}: first full credit on both lines after epoch {r['first_full_credit']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
