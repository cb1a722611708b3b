"""Deterministic generators of everything under fixtures/: attention, notebook and language-model cases.

The case sets' expected values come from torch in float64. Its matrix products (MKL) and vectorised
kernels choose their code by the CPU's instruction set, so on another CPU the last bits of a product
differ. `python -m autograder.fixturegen` therefore runs with MKL's conditional numerical
reproducibility (MKL_CBWR=COMPATIBLE) and torch's plain kernels (ATEN_CPU_CAPABILITY=default), both set
before torch starts: the same bytes on any x86-64 machine, whatever its instruction set.
"""

REPRODUCIBLE_ENV = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "default"}
