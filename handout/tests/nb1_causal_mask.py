OK_FORMAT = True

test = {   'name': 'nb1_causal_mask',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> m = causal_mask(3)\n'
                                               ">>> assert np.shape(m) == (3, 3), f'expected shape (3, 3), got {np.shape(m)}'\n"
                                               ">>> assert np.all(np.diag(m) == 0), 'the diagonal must be 0: a position may attend to itself'\n"
                                               ">>> assert np.array_equal(m, [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]]), '0 on and below the diagonal, -inf strictly above'\n",
                                       'failure_message': 'M[i, j] = 0 for j <= i and -inf for j > i',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> w, _ = scaled_dot_product_attention(np.eye(4), np.eye(4), np.ones((4, 2)), causal_mask(4))\n'
                                               ">>> assert not np.isnan(w).any() and np.allclose(np.triu(w, k=1), 0), 'with the causal mask no position may attend to a later one'\n",
                                       'failure_message': 'the causal mask must block exactly the future',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
