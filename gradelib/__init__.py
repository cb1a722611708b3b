"""The grading library that ships to students: one handin graded on any case set, the same code for course staff and
students."""
