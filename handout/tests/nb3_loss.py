OK_FORMAT = True

test = {   'name': 'nb3_loss',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> loss = lm_loss(torch.zeros(2, 3, VOCAB_SIZE), torch.tensor([[2, 3, 4], [5, 6, 7]]))\n'
                                               ">>> assert abs(float(loss) - math.log(VOCAB_SIZE)) < 1e-05, f'expected log(30) = {math.log(30):.5f}, got {float(loss):.5f}'\n",
                                       'failure_message': 'uniform logits over 30 tokens give a loss of log(30) whatever the targets',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> logits = torch.zeros(1, 3, VOCAB_SIZE)\n'
                                               '>>> logits[0, 0, 2] = 5.0\n'
                                               '>>> loss = lm_loss(logits, torch.tensor([[2, PAD, PAD]]))\n'
                                               '>>> expected = -torch.log_softmax(logits[0, 0], -1)[2]\n'
                                               ">>> assert abs(float(loss) - float(expected)) < 1e-05, f'expected {float(expected):.5f} (one real target), got {float(loss):.5f}'\n",
                                       'failure_message': 'PAD targets must not count: average over the other positions only',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
