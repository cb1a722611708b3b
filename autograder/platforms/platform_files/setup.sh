#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image:
# a Python >= 3.11 virtual environment at /autograder/venv with what grading
# needs (requirements-grading.txt: CPU-only torch, numpy, matplotlib, tqdm), and
# bubblewrap for the namespace sandbox. It runs apt-get: an image build script,
# never for a personal machine. No network is needed afterwards.
set -euo pipefail
cd /autograder/source

pick_python() {
    for py in python3.13 python3.12 python3.11 python3; do
        if command -v "$py" >/dev/null && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "$py"; return 0
        fi
    done
    return 1
}

apt-get update -qq || true
if ! PY=$(pick_python); then
    # Ubuntu 22.04 images ship 3.10; 3.11 is in the distribution's updates.
    apt-get install -y --no-install-recommends python3.11 python3.11-venv
    PY=python3.11
fi
apt-get install -y --no-install-recommends "$(basename "$PY")-venv" || true
# Namespaces for the sandbox; without them grading falls back to Landlock and says so.
apt-get install -y --no-install-recommends bubblewrap util-linux \
    || echo "setup.sh: bubblewrap could not be installed; submissions are graded at the Landlock level"
"$PY" -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
/autograder/venv/bin/python -m pip install --quiet -r requirements-grading.txt \
    --extra-index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/python -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__)"
