OK_FORMAT = True

test = {   'name': 'nb1_cross_entropy',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]])\n'
                                               '>>> loss = cross_entropy_loss(np.log(probs), np.array([0, -100, 2]))\n'
                                               ">>> assert np.ndim(loss) == 0, f'the loss must be a scalar, got shape {np.shape(loss)}'\n"
                                               ">>> assert np.isclose(loss, -(np.log(0.5) + np.log(0.6)) / 2), 'average over the scored positions only (here 2 of 3)'\n",
                                       'failure_message': 'skip positions whose target is ignore_index, and divide by the number of scored positions',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])\n'
                                               '>>> assert np.isclose(cross_entropy_loss(np.log(probs), np.array([7, 2]), ignore_index=7), -np.log(0.8))\n',
                                       'failure_message': 'use the ignore_index argument, not a hard-coded -100',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
