"""The student kit: grades one handin on any case set, the same code for course staff and students."""
