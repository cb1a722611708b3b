"""Staff tools that build from solutions/ and fixtures/: the handout, notebooks, demo, benchmarks, test class."""
