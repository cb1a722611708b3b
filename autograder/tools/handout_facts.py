"""The corpus facts the handout states (its README, notebook 3's markdown), read from fixtures/lm/:
`{{name}}` placeholders."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"


class MarkerError(ValueError):
    """A solution marker or a placeholder that cannot be used; the message names the file."""


PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")
ORACLE_PHRASES = {
    "toy_source": "the exact probability model the corpus was drawn from",
    "ngram": "a character n-gram model of the whole corpus",
    "model": "a larger language model trained on the corpus",
}
TOY_PARAGRAPH = (
    "The text is toy English written by a probabilistic grammar (words in classes, subject–verb agreement, "
    "sentence ends). It was made for this course, so the grader knows the true probability of every next "
    "character."
)


def _chars(n: int) -> str:
    return f"{n / 1e6:.1f} million" if n >= 1_000_000 else f"{n:,}"


def default_runs(fixtures: Path = FIXTURES) -> dict | None:
    """fixtures/lm/default_runs.json (autograder/reference/default_runs.py) when it measured this corpus, else None."""
    from autograder.reference.provenance import corpus_hash

    path = fixtures / "lm" / "default_runs.json"
    runs = json.loads(path.read_text()) if path.is_file() else None
    return runs if runs and runs["runs"] and runs["corpus_sha256"] == corpus_hash(fixtures / "lm") else None


def runs_phrase(runs: dict | None) -> str:
    """What the measured runs of the default settings say of its length, for notebook 3's text."""
    if runs is None:
        return "No runs of the default settings were measured on this corpus."
    firsts, epochs = [r["first_full_credit"] for r in runs["runs"]], runs["epochs"]
    each = [f"{'never' if f is None else f} (seed {r['seed']})" for f, r in zip(firsts, runs["runs"])]
    said = each[0] if len(each) == 1 else ", ".join(each[:-1]) + " and " + each[-1]
    spare = epochs - max(firsts) if None not in firsts else -1
    length = (f"`EPOCHS = {epochs}` leaves {spare} epoch{'s' * (spare != 1)} to spare" if spare >= 0
              else f"`EPOCHS = {epochs}` is not always enough on this corpus")
    return (f"{length}: in {len(firsts)} runs of the default settings the model first earned full credit on both "
            f"quality lines after epoch {said} of {epochs}.")


def time_phrase(runs: dict | None, ref: dict) -> str:
    """How long the default run takes on 2 free cores, from what was measured, for the handout's README.

    A measured run of the notebook on 1 thread (its choice on a busy machine) bounds it: on a free core its wall time
    is its CPU time, and with 2 the notebook keeps 1 thread or 2, whichever is faster. Else the reference run's
    training steps on 2 threads: half their CPU seconds is the least 2 cores need."""
    timed = [r for r in (runs or {}).get("runs", []) if r.get("threads") == 1 and r.get("cpu_s") and "source" not in r]
    if timed:
        r = max(timed, key=lambda r: r["cpu_s"])
        return (f"A run of the default settings (seed {r['seed']}) used {r['cpu_s']:,.0f} CPU-seconds on the 1 thread "
                f"it chose, evaluations included, in {r['wall_s'] / 60:.0f} minutes on a shared machine.\n"
                f"On 2 free CPU cores it takes at most about {math.ceil(r['cpu_s'] / 60)} minutes.")
    cpu = ref.get("train_cpu_s", 2 * ref["train_s"])
    return (f"With the default settings the reference run's training steps used {cpu:,.0f} CPU-seconds on 2 threads: "
            f"at least {max(1, int(cpu / 120))} minutes on 2 free CPU cores.")


def corpus_facts(fixtures: Path = FIXTURES) -> dict[str, str]:
    """The corpus facts the handout states, from the fixtures (and the grader's constants): placeholder name -> text."""
    from autograder.reference.provenance import check_reference
    from gradelib.problems.lm_model import GENERATE_CHECK_ROWS, PREDICT_CHECK_ROWS

    lm = fixtures / "lm"
    check_reference(lm)  # a reference of another corpus would state stale figures
    info = json.loads((lm / "oracle.json").read_text())
    ref = json.loads((lm / "reference_model.json").read_text())
    train_chars = len((lm / "train.txt").read_text())
    kind = info["oracle"]["kind"]
    if "corpus" in info:
        c = info["corpus"]
        name = c["path"]
        kept = c.get("chars_kept", train_chars)
        paragraph = (f"The text comes from {name}: {c.get('sentences', 0):,} sentences ({_chars(kept)} characters once "
                     "upper-cased and reduced to A-Z, apostrophe and space). Nobody knows the true probability of its "
                     f"next characters, so the grader scores generated text with {ORACLE_PHRASES[kind]}.")
    else:
        name = "toy English made for this course"
        paragraph = (
            TOY_PARAGRAPH
            if kind == "toy_source"
            else (
                TOY_PARAGRAPH.rsplit(" It was made", 1)[0]
                + f" The grader scores generated text with {ORACLE_PHRASES[kind]}."
            )
        )
    epochs = ref["epochs"]  # one record per epoch, or per few epochs of a small corpus
    n_epochs = epochs[-1]["epoch"]
    final = ref.get("float16_checkpoint", epochs[-1])
    passing = [r["epoch"] for r in epochs if r.get("passes_full_credit")]
    if not passing:
        full = f"did not earn full credit on both within its {n_epochs} epochs"
    else:
        first = passing[0]
        steady = passing == [r["epoch"] for r in epochs if r["epoch"] >= first]
        full = f"earned full credit on both {'from' if steady else 'first at'} epoch {first}{' on' if steady else ''}"
    return {
        "corpus_name": name,
        "corpus_paragraph": paragraph,
        "oracle_phrase": ORACLE_PHRASES[kind],
        "train_chars": _chars(train_chars),
        "reference_parameters": f"{ref['parameters']:,}",
        "reference_epochs": str(n_epochs),
        "train_time_phrase": time_phrase(default_runs(fixtures), ref),
        "reference_val_nll": f"{final['val_prediction_nll']:.2f}",
        "reference_generation_perplexity": f"{final['generation_perplexity']:.1f}",
        "full_credit_phrase": full,
        "check_rows": str(min(PREDICT_CHECK_ROWS, GENERATE_CHECK_ROWS)),
        "default_runs_phrase": runs_phrase(default_runs(fixtures)),
    }


def fill_facts(text: str, facts: dict[str, str], where: str, json_string: bool = False) -> str:
    """Replace every {{name}} in text; an unknown name is an error naming the file."""
    unknown = sorted({m for m in PLACEHOLDER.findall(text) if m not in facts})
    if unknown:
        raise MarkerError(f"{where}: unknown placeholder(s) {unknown}; known: {sorted(facts)}")
    # Inside a notebook's JSON a value must be a valid string body.
    return PLACEHOLDER.sub(lambda m: json.dumps(facts[m.group(1)], ensure_ascii=False)[1:-1] if json_string
                           else facts[m.group(1)], text)
