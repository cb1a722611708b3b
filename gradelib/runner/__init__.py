"""The student kit's one way to run code: a child process with time, CPU, output and memory limits."""
