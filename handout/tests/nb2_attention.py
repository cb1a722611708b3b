OK_FORMAT = True

test = {   'name': 'nb2_attention',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> Q = torch.randn(2, 3, 4, dtype=torch.float64)\n'
                                               '>>> K = torch.randn(2, 5, 4, dtype=torch.float64)\n'
                                               '>>> V = torch.randn(2, 5, 6, dtype=torch.float64)\n'
                                               '>>> A, C = attention(Q, K, V)\n'
                                               ">>> assert A.shape == (2, 3, 5) and C.shape == (2, 3, 6), f'expected A (2, 3, 5) and C (2, 3, 6), got {tuple(A.shape)} and {tuple(C.shape)}'\n"
                                               ">>> assert torch.allclose(A.sum(-1), torch.ones(2, 3, dtype=torch.float64)), 'rows of A must sum to 1 over the keys'\n"
                                               '>>> assert torch.allclose(C, A @ V)\n',
                                       'failure_message': 'A is (B, Tq, Tk) with rows summing to 1, C = A @ V is (B, Tq, Dv)',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> Q = K = torch.eye(2, dtype=torch.float64)[None]\n'
                                               '>>> V = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]], dtype=torch.float64)\n'
                                               '>>> A, _ = attention(Q, K, V)\n'
                                               '>>> a = math.exp(1 / math.sqrt(2))\n'
                                               ">>> assert torch.allclose(A[0, 0], torch.tensor([a / (a + 1), 1 / (a + 1)], dtype=torch.float64)), 'scale the scores by 1/sqrt(D)'\n",
                                       'failure_message': 'scores are Q K^T / sqrt(D)',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> Q = torch.randn(1, 3, 2, dtype=torch.float64)\n'
                                               '>>> K = torch.randn(1, 3, 2, dtype=torch.float64)\n'
                                               '>>> V = torch.randn(1, 3, 2, dtype=torch.float64)\n'
                                               '>>> allowed = torch.tensor([[[True, False, True], [False, False, False], [True, True, True]]])\n'
                                               '>>> A, C = attention(Q, K, V, allowed)\n'
                                               ">>> assert not torch.isnan(A).any() and (not torch.isnan(C).any()), 'a fully masked row must not produce NaN'\n"
                                               ">>> assert torch.all(A[~allowed] == 0), 'blocked keys must get weight exactly 0'\n"
                                               ">>> assert torch.allclose(A[0, 0].sum(), torch.tensor(1.0, dtype=torch.float64)), 'a row sums to 1 over its allowed keys'\n"
                                               ">>> assert torch.all(A[0, 1] == 0) and torch.all(C[0, 1] == 0), 'a query with no allowed key gets zeros in A and in C'\n",
                                       'failure_message': 'mask with -inf before the softmax; rows with no allowed key are all zeros',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
