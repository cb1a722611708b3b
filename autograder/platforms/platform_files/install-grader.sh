#!/bin/sh
# The grading images' one install step (Autolab's and PrairieLearn's Dockerfiles run it): a virtual
# environment at /opt/grader with requirements-grading.txt, from the files the Dockerfile copied to
# /opt/grader-build (this script, the requirements, wheels/). torch comes from the CPU wheel in wheels/
# when one is there (`make autolab` or `make prairielearn` with TORCH_WHEEL=...), else from PyTorch's CPU
# index (PyPI's Linux build carries CUDA). Any other wheel in wheels/ is used before PyPI's; with every
# wheel there, PIP_NO_INDEX=1 (the Dockerfile's build argument) installs without a package index.
set -eu
build=/opt/grader-build
python3 -m venv /opt/grader
pip="/opt/grader/bin/pip install --no-cache-dir --find-links $build/wheels"
wheel=$(ls "$build"/wheels/torch-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
    $pip "$wheel"
else
    $pip --index-url https://download.pytorch.org/whl/cpu "$(grep -E '^torch==' "$build/requirements-grading.txt")"
fi
$pip -r "$build/requirements-grading.txt"
/opt/grader/bin/python -c "import torch, numpy, matplotlib; print('torch', torch.__version__)"
rm -rf "$build"
