"""The secret text source of the toy-English corpus, its automaton and the n-gram oracles that score generations."""
