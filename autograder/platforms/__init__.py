"""Gradescope and Autolab: grading at run time on each platform and building their packages."""
