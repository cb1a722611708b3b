"""Write fixtures/MANIFEST.sha256: the checksum of every file under fixtures/.

The format is sha256sum's, so `cd fixtures && sha256sum -c MANIFEST.sha256`
verifies a copy. Run last by `make fixtures`; it prints what it covered.

    python -m autograder.fixturegen [--out fixtures]
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

NAME = "MANIFEST.sha256"


def write(root: Path) -> Path:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.name != NAME)
    lines, sizes = [], Counter()
    for path in files:
        rel = path.relative_to(root).as_posix()
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {rel}\n")
        sizes[rel.split("/")[0]] += path.stat().st_size
    out = root / NAME
    out.write_text("".join(lines))
    parts = ", ".join(f"{top}/ {n / 1e6:.2f} MB" for top, n in sorted(sizes.items()))
    print(f"{NAME}: {len(files)} files ({parts})")
    return out
