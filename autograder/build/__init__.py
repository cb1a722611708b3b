"""Builds from solutions/ and fixtures/: the handout, its notebooks, the demo, benchmarks and the test class."""
