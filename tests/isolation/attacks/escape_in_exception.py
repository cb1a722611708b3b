# Raises with terminal escapes, a bell and a right-to-left override in its message.

raise RuntimeError("\x1b[2J\x07 cleared your screen \x1b]0;owned\x07 \u202e")
