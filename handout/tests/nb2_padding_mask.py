OK_FORMAT = True

test = {   'name': 'nb2_padding_mask',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> tokens = torch.tensor([[0, 5, 6, 0, 1, 1], [0, 7, 0, 1, 1, 1]])\n'
                                               '>>> p = padding_mask(tokens, 1)\n'
                                               ">>> assert p.dtype == torch.bool and p.shape == (2, 6), f'expected a (2, 6) bool tensor, got {tuple(p.shape)} {p.dtype}'\n"
                                               ">>> assert torch.equal(p, tokens != 1), 'True exactly where the token is not pad_id'\n",
                                       'failure_message': 'padding_mask is True where the token is not pad_id',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> tokens = torch.tensor([[0, 5, 6, 0, 1, 1]])\n'
                                               '>>> m = combined_mask(tokens, 1)\n'
                                               ">>> assert m.shape == (1, 6, 6) and m.dtype == torch.bool, f'expected a (1, 6, 6) bool tensor, got {tuple(m.shape)} {m.dtype}'\n"
                                               ">>> assert not m[0, :, 4:].any(), 'no query may attend to a padded key (columns 4 and 5)'\n"
                                               ">>> assert m[0, 5, :4].all(), 'a padded query still sees the real tokens before it: padding masks keys, not queries'\n"
                                               ">>> assert not m[0, 2, 3], 'the causal part still blocks the future'\n",
                                       'failure_message': 'combine the causal mask with the padding mask on the key (last) axis',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
