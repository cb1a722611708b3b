OK_FORMAT = True

test = {   'name': 'nb2_uniform_attention',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> X = torch.tensor([[[2.0, 0.0], [4.0, 2.0], [0.0, 4.0]]])\n'
                                               '>>> H = uniform_attention(X)\n'
                                               ">>> assert H.shape == (1, 3, 2), f'expected shape (1, 3, 2), got {tuple(H.shape)}'\n"
                                               ">>> assert torch.allclose(H, torch.tensor([[[2.0, 0.0], [3.0, 1.0], [2.0, 2.0]]])), 'H[t] must be the mean of X[0..t]'\n",
                                       'failure_message': 'H[b, t] is the mean of X[b, 0], ..., X[b, t]',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> X = torch.randn(2, 5, 3, dtype=torch.float64)\n'
                                               '>>> H = uniform_attention(X)\n'
                                               '>>> assert H.dtype == torch.float64, f"keep the input\'s dtype, got {H.dtype}"\n'
                                               ">>> assert torch.allclose(H[1, 4], X[1].mean(dim=0)), 'the last position averages the whole sequence'\n",
                                       'failure_message': 'works per batch element and keeps float64',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
