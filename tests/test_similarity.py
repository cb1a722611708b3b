"""Similarity between submissions (autograder/batch/similarity.py and the modules it uses): copies are found, honest
work is not.

Every handin is built here in tmp dirs: attention.py variants written below or
derived from solutions/attention.py, notebooks made from handout/ with the
TODO lines filled in.
"""

from __future__ import annotations

import csv
import io
import json
import re
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from copydetect import compare_files

from autograder.batch import compared_code
from autograder.batch import similarity as sim
from autograder.batch import similarity_report as pages
from autograder.batch import winnowing as winnow

from notebook_tools import NB2, source, student_form
from support import HANDOUT, SOLUTIONS

pytestmark = pytest.mark.slow

THRESHOLD = 0.5
REFERENCE = (SOLUTIONS / "attention.py").read_text()
STUB = (HANDOUT / "attention.py").read_text()
NB3 = "03_language_model.ipynb"
NB1 = "01_mlm_and_next_token.ipynb"

# Three independent correct solutions of the same task, written the way different students would.
EINSUM = STUB.replace(
    '''        # TODO 1.1 forward: projections, scores, causal softmax, context
        raise NotImplementedError("TODO 1.1 forward: projections, scores, causal softmax, context")
''', '''        self.K = torch.einsum("btd,dk->btk", X, self.W_k)
        self.Q = torch.einsum("btd,dk->btk", X, self.W_q)
        self.V = torch.einsum("btd,dv->btv", X, self.W_v)
        self.A_w = torch.einsum("bik,bjk->bij", self.Q, self.K)
        n = X.shape[1]
        allowed = torch.tril(torch.ones(n, n)).bool()
        z = torch.where(allowed, self.A_w / self.W_k.shape[1] ** 0.5, torch.tensor(-float("inf")))
        self.A_sig = torch.softmax(z, dim=2)
        X_new = torch.einsum("bij,bjv->biv", self.A_sig, self.V)
''').replace(
    '''        # TODO 1.1 backward: gradients of V, scores, Q, K, weights and X
        raise NotImplementedError("TODO 1.1 backward: gradients of V, scores, Q, K, weights and X")
''', '''        g = torch.einsum("biv,bjv->bij", dLdXnew, self.V)
        s = self.A_sig
        gz = s * (g - torch.einsum("bij,bij->bi", g, s)[:, :, None])
        gz = gz / self.W_k.shape[1] ** 0.5
        self.dLdV = torch.einsum("bij,biv->bjv", s, dLdXnew)
        self.dLdQ = torch.einsum("bij,bjk->bik", gz, self.K)
        self.dLdK = torch.einsum("bij,bik->bjk", gz, self.Q)
        self.dLdWq = torch.einsum("btd,btk->dk", self.X, self.dLdQ)
        self.dLdWk = torch.einsum("btd,btk->dk", self.X, self.dLdK)
        self.dLdWv = torch.einsum("btd,btv->dv", self.X, self.dLdV)
        dLdX = torch.einsum("btk,dk->btd", self.dLdQ, self.W_q)
        dLdX = dLdX + torch.einsum("btk,dk->btd", self.dLdK, self.W_k)
        dLdX = dLdX + torch.einsum("btv,dv->btd", self.dLdV, self.W_v)
''')

BMM = STUB.replace(
    '''        # TODO 1.1 forward: projections, scores, causal softmax, context
        raise NotImplementedError("TODO 1.1 forward: projections, scores, causal softmax, context")
''', '''        batch, steps, _ = X.shape
        flat = X.reshape(batch * steps, -1)
        self.K = torch.mm(flat, self.W_k).view(batch, steps, -1)
        self.Q = torch.mm(flat, self.W_q).view(batch, steps, -1)
        self.V = torch.mm(flat, self.W_v).view(batch, steps, -1)
        self.A_w = torch.bmm(self.Q, self.K.permute(0, 2, 1))
        scale = 1.0 / math.sqrt(self.K.size(-1))
        causal = torch.ones_like(self.A_w[0]).triu(1).bool().unsqueeze(0)
        logits = self.A_w.mul(scale).masked_fill(causal, -math.inf)
        top = logits.amax(dim=2, keepdim=True)
        e = (logits - top).exp()
        self.A_sig = e.div(e.sum(2, keepdim=True))
        X_new = torch.bmm(self.A_sig, self.V)
''').replace(
    '''        # TODO 1.1 backward: gradients of V, scores, Q, K, weights and X
        raise NotImplementedError("TODO 1.1 backward: gradients of V, scores, Q, K, weights and X")
''', '''        scale = 1.0 / math.sqrt(self.K.size(-1))
        grad_sig = torch.bmm(dLdXnew, self.V.permute(0, 2, 1))
        inner = torch.sum(grad_sig * self.A_sig, dim=2, keepdim=True)
        grad_w = self.A_sig.mul(grad_sig.sub(inner)).mul(scale)
        self.dLdV = torch.bmm(self.A_sig.permute(0, 2, 1), dLdXnew)
        self.dLdQ = torch.bmm(grad_w, self.K)
        self.dLdK = torch.bmm(grad_w.permute(0, 2, 1), self.Q)
        batch = self.X.size(0)
        xs = self.X.reshape(-1, self.X.size(-1))
        self.dLdWq = torch.mm(xs.t(), self.dLdQ.reshape(-1, self.dLdQ.size(-1)))
        self.dLdWk = torch.mm(xs.t(), self.dLdK.reshape(-1, self.dLdK.size(-1)))
        self.dLdWv = torch.mm(xs.t(), self.dLdV.reshape(-1, self.dLdV.size(-1)))
        parts = [torch.mm(g.reshape(-1, g.size(-1)), w.t()) for g, w in
                 ((self.dLdQ, self.W_q), (self.dLdK, self.W_k), (self.dLdV, self.W_v))]
        dLdX = sum(parts).view(batch, -1, self.X.size(-1))
''')

LOOPS = STUB.replace(
    '''        # TODO 1.1 forward: projections, scores, causal softmax, context
        raise NotImplementedError("TODO 1.1 forward: projections, scores, causal softmax, context")
''', '''        self.K, self.Q, self.V = (torch.matmul(X, w) for w in (self.W_k, self.W_q, self.W_v))
        B, T, _ = X.shape
        dk = self.W_q.shape[1]
        self.A_w = torch.zeros(B, T, T, dtype=X.dtype)
        self.A_sig = torch.zeros(B, T, T, dtype=X.dtype)
        for b in range(B):
            for i in range(T):
                row = torch.stack([torch.dot(self.Q[b, i], self.K[b, j]) for j in range(T)])
                self.A_w[b, i] = row
                visible = row[: i + 1] / dk ** 0.5
                p = torch.exp(visible - visible.max())
                self.A_sig[b, i, : i + 1] = p / p.sum()
        X_new = torch.matmul(self.A_sig, self.V)
''').replace(
    '''        # TODO 1.1 backward: gradients of V, scores, Q, K, weights and X
        raise NotImplementedError("TODO 1.1 backward: gradients of V, scores, Q, K, weights and X")
''', '''        B, T, _ = self.X.shape
        dk = self.W_q.shape[1]
        self.dLdV = torch.zeros_like(self.V)
        d_scores = torch.zeros(B, T, T, dtype=self.X.dtype)
        for b in range(B):
            for i in range(T):
                p = self.A_sig[b, i]
                dp = torch.mv(self.V[b], dLdXnew[b, i])
                d_scores[b, i] = p * (dp - torch.dot(p, dp)) / dk ** 0.5
                for j in range(i + 1):
                    self.dLdV[b, j] += p[j] * dLdXnew[b, i]
        self.dLdQ = torch.matmul(d_scores, self.K)
        self.dLdK = torch.matmul(d_scores.transpose(-1, -2), self.Q)
        self.dLdWq = sum(self.X[b].T @ self.dLdQ[b] for b in range(B))
        self.dLdWk = sum(self.X[b].T @ self.dLdK[b] for b in range(B))
        self.dLdWv = sum(self.X[b].T @ self.dLdV[b] for b in range(B))
        dLdX = torch.matmul(self.dLdQ, self.W_q.T)
        dLdX += torch.matmul(self.dLdK, self.W_k.T)
        dLdX += torch.matmul(self.dLdV, self.W_v.T)
''')

# Two independent solutions of notebook 2's functions (the reference is the third).
NB2_OWN = {
    "uniform_attention": """steps = torch.arange(X.shape[1]) + 1.0
out = torch.zeros_like(X)
for t in range(X.shape[1]):
    out[:, t] = X[:, : t + 1].sum(dim=1) / steps[t]
return out""",
    "attention": """d = K.size(-1)
w = torch.einsum("bqd,bkd->bqk", Q, K) * d ** -0.5
if mask is None:
    mask = torch.ones_like(w, dtype=torch.bool)
w = torch.where(mask, w, torch.full_like(w, -1e30))
w = w - w.max(-1, keepdim=True).values
e = torch.exp(w) * mask
total = e.sum(-1, keepdim=True)
A = torch.where(total > 0, e / total.clamp_min(1e-300), torch.zeros_like(e))
return A, torch.einsum("bqk,bkv->bqv", A, V)""",
    "causal_mask": """idx = torch.arange(T)
return idx[:, None] >= idx[None, :]""",
    "padding_mask": """return torch.ne(tokens, pad_id)""",
    "combined_mask": """n = tokens.size(1)
keys = (tokens != pad_id).unsqueeze(1).expand(-1, n, -1)
return keys & causal_mask(n).unsqueeze(0)""",
    "masked_mean_loss": """keep = (targets != pad_id).to(logits.dtype)
lse = torch.logsumexp(logits, dim=2)
picked = torch.take_along_dim(logits, targets[..., None], dim=2)[..., 0]
return ((lse - picked) * keep).sum() / keep.sum()""",
    "perplexity": """loss = masked_mean_loss(logits, targets, pad_id)
return loss.exp()""",
}
NB2_OTHER = {
    "uniform_attention": """n = X.size(1)
weights = torch.tril(torch.ones(n, n, dtype=X.dtype))
weights = weights / weights.sum(dim=1, keepdim=True)
return torch.matmul(weights, X)""",
    "attention": """scores = torch.matmul(Q, K.transpose(1, 2)) / (Q.shape[2] ** 0.5)
if mask is not None:
    scores[~mask] = float('-inf')
best = scores.max(dim=2, keepdim=True).values.nan_to_num(0.0, neginf=0.0)
ex = (scores - best).exp()
denom = ex.sum(dim=2, keepdim=True)
denom[denom == 0] = 1.0
probs = ex / denom
return probs, torch.matmul(probs, V)""",
    "causal_mask": """m = torch.zeros((T, T), dtype=torch.bool)
for i in range(T):
    m[i, : i + 1] = True
return m""",
    "padding_mask": """return ~(tokens == pad_id)""",
    "combined_mask": """B, T = tokens.shape
real = padding_mask(tokens, pad_id)
out = torch.zeros(B, T, T, dtype=torch.bool)
for b in range(B):
    out[b] = causal_mask(T) & real[b].view(1, T)
return out""",
    "masked_mean_loss": """lp = torch.nn.functional.log_softmax(logits, -1)
flat_lp = lp.reshape(-1, lp.shape[-1])
flat_t = targets.reshape(-1)
ok = flat_t != pad_id
chosen = flat_lp[torch.arange(flat_t.numel())[ok], flat_t[ok]]
return -chosen.sum() / ok.sum()""",
    "perplexity": """return torch.exp(masked_mean_loss(logits, targets, pad_id))""",
}


def _handout_nb(name: str) -> dict:
    return json.loads((HANDOUT / name).read_text())


def filled(name: str, bodies: dict[str, str]) -> str:
    """The handout notebook `name` with each function's `raise NotImplementedError("TODO ...")` replaced by a body."""
    nb = _handout_nb(name)
    for fn, body in bodies.items():
        cells = [c for c in nb["cells"] if c["cell_type"] == "code" and f"def {fn}(" in source(c)]
        assert len(cells) == 1, fn
        src = source(cells[0])
        head, tail = src.split(f"def {fn}(", 1)
        todo = re.search(r"\n(\s*)raise NotImplementedError\(\"TODO[^\n]*", tail)
        assert todo, fn
        indent = todo.group(1)
        new_body = "\n" + "\n".join(indent + line if line else line for line in body.split("\n"))
        cells[0]["source"] = head + f"def {fn}(" + tail[: todo.start()] + new_body + tail[todo.end():]
    return json.dumps(nb)


def reference_bodies(name: str) -> dict[str, str]:
    """Each function's solution in the master notebook, dedented to the function's body level."""
    out = {}
    for cell in student_form(name)["cells"]:
        for m in re.finditer(r"def (\w+)\(.*?# BEGIN SOLUTION NO PROMPT\n(.*?)\n\s*# END SOLUTION", source(cell), re.S):
            lines = m.group(2).split("\n")
            out[m.group(1)] = "\n".join(line[4:] for line in lines)
    return out


def rename(code: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        code = re.sub(rf"\b{re.escape(old)}\b", new, code)
    return code


def swap_methods(code: str) -> str:
    """backward defined before forward: the functions reordered."""
    start = code.index("    def forward(")
    middle = code.index("    def backward(")
    return code[:start] + code[middle:].rstrip("\n") + "\n\n" + code[start:middle].rstrip("\n") + "\n"


def handin(root: Path, name: str, files: dict[str, str], as_tar: bool = False) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    if not as_tar:
        for fname, text in files.items():
            (folder / fname).write_text(text)
        return folder
    path = folder / "handin.tar"
    with tarfile.open(path, "w") as tar:
        for fname, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(fname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def blank() -> dict[str, str]:
    return {f: (HANDOUT / f).read_text() for f in compared_code.FILES}


def pair_scores(out: Path) -> dict[frozenset, float]:
    """Pair -> its score (highest over files and directions), from similarity.csv."""
    scores: dict[frozenset, float] = {}
    with open(out / "similarity.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            key = frozenset((row["submission_a"], row["submission_b"]))
            scores[key] = max(scores.get(key, 0.0), float(row["score_a"]), float(row["score_b"]))
    return scores


@pytest.fixture(scope="module")
def cls(tmp_path_factory) -> tuple[pages.Run, Path, list[Path]]:
    """A small class: a copier of each kind, independent solutions, and two blank handouts."""
    root = tmp_path_factory.mktemp("class")
    ref_nb2 = filled(NB2, reference_bodies(NB2))
    base = blank()
    copied_py = swap_methods(rename(REFERENCE, {
        "scores": "logits", "weights": "probs", "future": "upper", "row_dot": "inner", "X_t": "xt",
        "dLdA_sig": "grad_sig", "dLdA_w": "grad_w", "d_k": "dim_k", "T": "n_steps",
    }))
    copied_nb2 = rename(ref_nb2, {"counts": "lengths", "scores": "s", "no_key": "empty_rows", "keys_real": "real",
                                  "log_probs": "lp", "nll": "neg_ll", "valid": "keep"})
    subs = [
        handin(root, "alice", {**base, "attention.py": REFERENCE}, as_tar=True),
        handin(root, "bob", {**base, "attention.py": copied_py}),  # copied alice's attention.py
        handin(root, "carol", {**base, "attention.py": EINSUM, NB2: ref_nb2}, as_tar=True),
        handin(root, "dave", {**base, "attention.py": BMM, NB2: copied_nb2}),  # copied carol's notebook 2
        handin(root, "erin", {**base, "attention.py": LOOPS, NB2: filled(NB2, NB2_OWN)}, as_tar=True),
        handin(root, "frank", {**base, NB2: filled(NB2, NB2_OTHER)}),
        handin(root, "blank1", base),
        handin(root, "blank2", base, as_tar=True),
    ]
    out = root / "out"
    run = sim.run_class(subs, out, threshold=THRESHOLD, jobs=1)
    return run, out, subs


def test_planted_copies_come_out_on_top_and_flagged(cls):
    run, out, _ = cls
    pairs = pages.pairs_for_report(out)
    top = {frozenset((p["submission_a"], p["submission_b"])): p for p in pairs[:2]}
    assert set(top) == {frozenset(("alice", "bob")), frozenset(("carol", "dave"))}
    assert top[frozenset(("alice", "bob"))]["file"] == "attention.py"
    assert top[frozenset(("carol", "dave"))]["file"] == NB2
    assert all(p["flagged"] and p["score"] >= 0.9 for p in top.values())
    scores = pair_scores(out)
    assert scores[frozenset(("alice", "bob"))] >= 0.9
    assert scores[frozenset(("carol", "dave"))] >= 0.9


def test_independent_solutions_stay_below_the_flag_line(cls):
    _, out, _ = cls
    copies = {frozenset(("alice", "bob")), frozenset(("carol", "dave"))}
    others = {k: v for k, v in pair_scores(out).items() if k not in copies}
    assert others, "independent pairs share some code; none listed would mean nothing was compared"
    assert max(others.values()) < THRESHOLD, sorted(others.items(), key=lambda kv: -kv[1])[:5]
    flagged = [p for p in pages.pairs_for_report(out, limit=100) if p["flagged"]]
    assert {frozenset((p["submission_a"], p["submission_b"])) for p in flagged} == copies


def test_handout_code_alone_scores_zero(cls):
    run, out, _ = cls
    assert run.notes.get("blank1") is None and run.notes.get("blank2") is None
    with open(out / "similarity.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert not [r for r in rows if "blank1" in (r["submission_a"], r["submission_b"])
                or "blank2" in (r["submission_a"], r["submission_b"])]
    prints = {k: winnow.Prints(winnow.fingerprint(text, k, winnow.boilerplate_hashes(compared_code.handout_sources())))
              for k, text in [("attention.py", STUB)]}
    assert len(prints["attention.py"].keys) == 0  # every fingerprint of the stub is boilerplate


def test_matched_lines_point_at_the_copied_code(cls):
    run, out, _ = cls
    with open(out / "similarity.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if {r["submission_a"], r["submission_b"]} == {"alice", "bob"}
                and r["file"] == "attention.py"]
    assert len(rows) == 1
    alice_side = rows[0]["lines_a"] if rows[0]["submission_a"] == "alice" else rows[0]["lines_b"]
    first, last = (int(x) for x in alice_side.split(";")[0].split("-"))
    forward_solution = REFERENCE.split("\n").index('        # BEGIN SOLUTION task="1.1 forward: projections, '
                                                   'scores, causal softmax, context"') + 1
    assert first <= forward_solution + 2 <= last
    nb_rows = [r for r in csv.reader(open(out / "similarity.csv")) if NB2 in r and "dave" in r]
    assert nb_rows and all("cell " in r[5] for r in nb_rows)


def test_html_is_self_contained_escaped_and_flags(cls, tmp_path):
    _, out, _ = cls
    html = (out / "similarity.html").read_text()
    assert "Content-Security-Policy" in html and "<script" not in html and "http" not in html.split("</head>")[1]
    assert html.count('<tr class="flag">') == 2
    # A notebook whose code holds markup is shown as text.
    evil = filled(
        NB2, {**NB2_OWN, "padding_mask": 'print("</pre><script>alert(1)</script>")\nreturn torch.ne(tokens, pad_id)'}
    )
    subs = [handin(tmp_path, n, {**blank(), NB2: evil}) for n in ("x", "y")]
    sim.run_class(subs, tmp_path / "out", threshold=THRESHOLD)
    page = (tmp_path / "out" / "similarity.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_fast_comparison_agrees_with_copydetect(cls):
    """compare() and score_rows() compute compare_files() faster: same similarities, same slices."""
    _, _, subs = cls
    boiler = winnow.boilerplate_hashes(compared_code.handout_sources())
    texts = [compared_code.load_submission(p, p.name).sources for p in subs]
    checked = 0
    for kind in ("attention.py", NB2):
        fps = [winnow.fingerprint(t[kind].text, kind, boiler) for t in texts if kind in t]
        matrix = winnow.score_rows([winnow.Prints(f) for f in fps], list(range(len(fps))))
        for i in range(len(fps)):
            for j in range(i + 1, len(fps)):
                _, (ea, eb), (xa, xb) = compare_files(fps[i], fps[j])
                a, b, sa, sb = winnow.compare(winnow.Prints(fps[i]), winnow.Prints(fps[j]))
                assert (a, b) == (ea, eb)
                assert (matrix[i, j], matrix[j, i]) == (ea, eb)
                if sa is not None:
                    checked += 1
                    assert np.array_equal(winnow.raw_slices(fps[i], sa), xa)
                    assert np.array_equal(winnow.raw_slices(fps[j], sb), xb)
    assert checked >= 10


def test_unreadable_archive_and_missing_files_are_reported(tmp_path, capsys, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    bad = tmp_path / "mallory" / "handin.tar"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not a tar archive at all" * 10)
    link = tmp_path / "zed" / "handin.tar"
    link.parent.mkdir()
    with tarfile.open(link, "w") as tar:
        info = tarfile.TarInfo("attention.py")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    partial = handin(tmp_path, "pat", {"attention.py": REFERENCE, NB2: "{not json"})
    nonutf = handin(tmp_path, "quinn", {NB1: (HANDOUT / NB1).read_text()})
    (nonutf / "attention.py").write_bytes(b"\xff\xfe\x00bad")
    full = handin(tmp_path, "rita", {**blank(), "attention.py": REFERENCE})
    out = tmp_path / "out"
    rc = sim.main([str(bad), str(link), str(partial), str(nonutf), str(full), str(tmp_path / "nobody"),
                   "--out", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert captured.out.startswith("similarity: 6 submissions, 15 pairs")
    notes = json.loads((out / "similarity.json").read_text())["notes"]
    assert "not a tar archive" in notes["mallory"][0]
    assert "is a link" in notes["zed"][0]
    assert "nobody" in notes and "does not exist" in notes["nobody"][0]
    assert any("02_attention_and_masks.ipynb is not valid notebook JSON" in n for n in notes["pat"])
    assert any(NB3 in n and "missing" in n for n in notes["pat"])
    assert any("attention.py is not UTF-8" in n for n in notes["quinn"])
    assert "rita" not in notes
    assert "mallory" in (out / "similarity.html").read_text()
    # pat and rita both hold the reference attention.py: still compared and flagged.
    assert pair_scores(out)[frozenset(("pat", "rita"))] >= 0.99
    assert not list(scratch.iterdir())  # every opened handin was removed


def test_bad_arguments_get_a_message(tmp_path, capsys):
    assert sim.main([str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert sim.main([str(tmp_path), str(tmp_path), "--out", str(tmp_path / "o"), "--threshold", "3"]) == 2
    err = capsys.readouterr().err
    assert "at least two submissions" in err and "--threshold must be between 0 and 1" in err
    assert pages.pairs_for_report(tmp_path / "nothing") == []


def test_jobs_give_the_same_rows(cls, tmp_path):
    run, _, subs = cls
    again = sim.run_class(subs, tmp_path / "out", threshold=THRESHOLD, jobs=2)
    assert [r[:5] for r in again.rows] == [r[:5] for r in run.rows]


def test_the_batch_grader_puts_the_pairs_and_the_flags_in_the_class_report(cls, tmp_path):
    import subprocess
    import sys

    from support import REPO

    _, _, subs = cls
    out = tmp_path / "grades"
    proc = subprocess.run([sys.executable, "-m", "autograder", *map(str, subs), "--only", "attention", "--jobs", "2",
                           "--similarity", "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(ln.startswith("graded 8 of 8") for ln in proc.stdout.splitlines()), proc.stdout
    assert "similarity: 8 submissions" in proc.stdout
    html = (out / "report.html").read_text()
    section = html[html.index("Most similar pairs"):]
    first_row = section[section.index("<tr><td>"):].split("</tr>")[0]
    assert {"alice", "bob"} <= set(re.findall(r"<td>(\w+)</td>", first_row)) or \
           {"carol", "dave"} <= set(re.findall(r"<td>(\w+)</td>", first_row)), first_row
    assert "Integrity flags (0)" in html
