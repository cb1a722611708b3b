"""The course grader's half of grading (never shipped): what only its uploads and hidden grading need.

The student kit (gradelib/) grades on the cases the handout holds; what the course grader adds
on top of it lives here, beside the isolation (autograder/isolation/), and uses the kit through
its interfaces: uploads.py reads every shape an upload comes in; rubric_check.py checks a rubric before
grading with it.
"""
