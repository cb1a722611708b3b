"""Staff-only tools that never ship: the class grader, platforms, the oracle, the reference model, fixtures, builds."""
