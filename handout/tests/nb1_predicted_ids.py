OK_FORMAT = True

test = {   'name': 'nb1_predicted_ids',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> ids = predicted_ids(np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]]))\n'
                                               ">>> assert np.shape(ids) == (2,), f'expected one id per position, shape (2,), got {np.shape(ids)}: check the axis of the arg-max'\n"
                                               '>>> assert list(ids) == [1, 0]\n',
                                       'failure_message': 'take the arg-max over the last (vocabulary) axis',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
