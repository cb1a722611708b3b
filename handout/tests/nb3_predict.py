OK_FORMAT = True

test = {   'name': 'nb3_predict',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> class _NextLetter(nn.Module):\n'
                                               '...     def forward(self, inp):\n'
                                               '...         nxt = torch.where(inp + 1 > 27, torch.full_like(inp, 2), inp + 1)\n'
                                               '...         return F.one_hot(nxt, VOCAB_SIZE).float() * 4.0\n'
                                               '>>> _p = predict(_NextLetter(), torch.tensor([[EOS, 2, 3]]), 4)\n'
                                               ">>> assert tuple(_p.shape) == (1, 4, VOCAB_SIZE), f'expected (1, 4, 30), got {tuple(_p.shape)}'\n"
                                               ">>> assert _p.argmax(-1).tolist() == [[4, 5, 6, 7]], f'expected the picks C D E F (ids 4..7), got ids {_p.argmax(-1).tolist()}'\n",
                                       'failure_message': 'predict must return (B, timesteps, 30) logits whose step t follows the greedy picks of steps < t',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
