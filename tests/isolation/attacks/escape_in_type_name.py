# Answers with objects of a type whose name holds terminal escapes, and raises with more of them.

import torch

Evil = type("Evil\x1b[2J\x07\u202e", (), {})


class Attention:
    def __init__(self, weights_keys, weights_queries, weights_values):
        pass

    def forward(self, X):
        self.Q = self.K = self.V = self.A_w = self.A_sig = Evil()
        return Evil()

    def backward(self, dLdXnew):
        raise ValueError("\x1b[31mred\x1b[0m \x07bell \x1b]8;;http://x\x07link\x1b]8;;\x07")
