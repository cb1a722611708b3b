# Writes a results.json with a forged score of 999 wherever a grader might read one: its own folder,
# the folders above it, its own and another submission's output folder, the output root and /tmp.

import errno, json, os
FORGED = {"score": 999.0, "tests": [{"name": "attention", "score": 999.0, "max_score": 30.0}]}
report = []
for label, path in [
    ("cwd", "results.json"),
    ("parent", "../results.json"),
    ("grandparent", "../../results.json"),
    ("own_out", "@OUT@/forged_results/results.json"),
    ("other_out", "@OUT@/reference_before/results.json"),
    ("out_root", "@OUT@/results.json"),
    ("tmp", "/tmp/forged-@MARKER@.json"),
]:
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as fh:
            json.dump(FORGED, fh)
        report.append(f"{label}:written")
    except OSError as exc:
        report.append(f"{label}:{type(exc).__name__}/{errno.errorcode.get(exc.errno, exc.errno)}")
raise RuntimeError("forgery " + " ".join(report))
