OK_FORMAT = True

test = {   'name': 'nb1_softmax',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> p = softmax(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))\n'
                                               '>>> assert p.shape == (2, 3), f"softmax must keep the input\'s shape (2, 3), got {p.shape}"\n'
                                               ">>> assert np.allclose(p.sum(axis=-1), 1.0), f'each row must sum to 1, got row sums {p.sum(axis=-1)}'\n",
                                       'failure_message': "softmax must return an array of the input's shape whose rows (last axis) sum to 1",
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> e = np.exp([1.0, 2.0, 3.0])\n>>> assert np.allclose(softmax(np.array([[1.0, 2.0, 3.0]])), e / e.sum())\n',
                                       'failure_message': 'softmax([1, 2, 3]) should be exp([1, 2, 3]) / sum(exp([1, 2, 3]))',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> p = softmax(np.array([[1000.0, 1000.0], [-1000.0, 0.0]]))\n'
                                               '>>> assert not np.isnan(p).any(), "softmax returned NaN for logits of size 1000: subtract each row\'s max before np.exp"\n'
                                               '>>> assert np.allclose(p, [[0.5, 0.5], [0.0, 1.0]])\n',
                                       'failure_message': "large logits overflow np.exp: subtract each row's max first",
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
