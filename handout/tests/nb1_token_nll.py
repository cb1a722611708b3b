OK_FORMAT = True

test = {   'name': 'nb1_token_nll',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])\n'
                                               '>>> nll = token_nll(np.log(probs), np.array([0, 2]))\n'
                                               ">>> assert np.shape(nll) == (2,), f'expected one loss per position, shape (2,), got {np.shape(nll)}'\n"
                                               '>>> assert np.allclose(nll, [-np.log(0.5), -np.log(0.8)])\n',
                                       'failure_message': 'token_nll[i] = -log softmax(logits[i])[target_ids[i]]',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> nll = token_nll(np.array([[1000.0, 0.0]]), np.array([1]))\n'
                                               ">>> assert np.isfinite(nll).all(), 'the loss is infinite: compute the log-softmax directly instead of np.log(softmax(...))'\n"
                                               '>>> assert np.allclose(nll, [1000.0])\n',
                                       'failure_message': 'use the max-subtracted log-softmax',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
