#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (Ubuntu 22.04 or
# 24.04, or Debian 12): a Python (3.10 or newer) virtual environment at /autograder/venv with
# what grading needs (requirements-grading.txt), the CPU build of torch, and bubblewrap for the
# namespace level. It runs apt-get: an image build script, never for a personal machine. No
# network is needed afterwards.
#
# torch comes from PyTorch's CPU index, never from PyPI, whose Linux build carries CUDA (gigabytes
# the grader never uses). Where that index cannot be reached, set TORCH_WHEEL to a CPU wheel of the
# pinned version (e.g. torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl) on the image, or
# the build stops here saying so.
set -euo pipefail
cd /autograder/source
say() { echo "setup.sh: $*"; }

export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq; then
    say "apt-get update failed (its errors are above): check the image's network and apt sources"; exit 1
fi
if ! command -v python3 >/dev/null || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get install -y --no-install-recommends python3 python3-venv
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { say "python3 is $(python3 -V 2>&1); grading needs 3.10 or newer"; exit 1; }
# Namespaces for the sandbox (a container that may make them); elsewhere grading uses the fallback and says so.
apt-get install -y --no-install-recommends bubblewrap util-linux \
    || say "bubblewrap could not be installed (apt's errors are above); submissions are graded at the fallback level"

python3 -m venv /autograder/venv
PIP=(/autograder/venv/bin/python -m pip)
"${PIP[@]}" install --quiet --upgrade pip
TORCH=$(grep -E '^torch==' requirements-grading.txt)
if [ -n "${TORCH_WHEEL:-}" ]; then
    say "installing torch from the local file $TORCH_WHEEL (TORCH_WHEEL), not from PyTorch's index"
    "${PIP[@]}" install --quiet "$TORCH_WHEEL"
elif ! "${PIP[@]}" install --quiet --index-url https://download.pytorch.org/whl/cpu "$TORCH"; then
    say "could not install the CPU build of $TORCH from https://download.pytorch.org/whl/cpu (pip's errors are above)."
    say "Not installing PyPI's build instead: it carries CUDA, gigabytes the grader never uses."
    say "Give the image network access to that index, or set TORCH_WHEEL to a CPU wheel of $TORCH."
    exit 1
fi
"${PIP[@]}" install --quiet -r requirements-grading.txt  # torch is there already: pip keeps the CPU build
/autograder/venv/bin/python -c "import torch, numpy; assert '+cpu' in torch.__version__ or not torch.version.cuda, torch.__version__; print('setup.sh: torch', torch.__version__, 'numpy', numpy.__version__)"
# The hidden cases and the grader are root's alone: a run at the fallback level, as a sandbox uid, reads the
# interpreter (/autograder/venv and the system's Python) and its own scratch folder, nothing here.
chmod -R go-rwx /autograder/source
chmod 755 /autograder/venv
say "done"
