OK_FORMAT = True

test = {   'name': 'nb1_attention',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> Q = np.array([[1.0, 0.0], [0.0, 1.0]])\n'
                                               '>>> V = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])\n'
                                               '>>> K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])\n'
                                               '>>> w, out = scaled_dot_product_attention(Q, K, V)\n'
                                               ">>> assert w.shape == (2, 3) and out.shape == (2, 2), f'expected weights (2, 3) and output (2, 2), got {w.shape} and {out.shape}'\n"
                                               ">>> assert np.allclose(w.sum(axis=-1), 1.0), 'each row of the weights must sum to 1 over the keys'\n",
                                       'failure_message': 'weights must be (Tq, Tk) with rows summing to 1; output must be (Tq, d_v)',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> Q = K = np.array([[1.0, 0.0], [0.0, 1.0]])\n'
                                               '>>> V = np.array([[1.0, 2.0], [3.0, 4.0]])\n'
                                               '>>> w, out = scaled_dot_product_attention(Q, K, V)\n'
                                               '>>> a = np.exp(1 / np.sqrt(2))\n'
                                               ">>> assert np.allclose(w, [[a / (a + 1), 1 / (a + 1)], [1 / (a + 1), a / (a + 1)]]), 'did you divide the scores by sqrt(d_k)?'\n"
                                               '>>> assert np.allclose(out, w @ V)\n',
                                       'failure_message': 'scores are Q K^T / sqrt(d_k); the output is weights @ V',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> Q = K = np.eye(3)\n'
                                               '>>> V = np.arange(6.0).reshape(3, 2)\n'
                                               '>>> blocked = np.array([[0.0, -np.inf, -np.inf], [0.0, 0.0, -np.inf], [0.0, 0.0, 0.0]])\n'
                                               '>>> w, out = scaled_dot_product_attention(Q, K, V, blocked)\n'
                                               ">>> assert np.allclose(w[0], [1.0, 0.0, 0.0]) and np.all(w[1, 2:] == 0), 'keys masked with -inf must get zero weight'\n",
                                       'failure_message': 'add the mask to the scores before the softmax',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
