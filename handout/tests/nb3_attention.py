OK_FORMAT = True

test = {   'name': 'nb3_attention',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> torch.manual_seed(0)\n'
                                               '>>> _att = CausalSelfAttention(ModelConfig(d_model=8, n_heads=2, max_len=16, dropout=0.0)).eval()\n'
                                               '>>> _y = _att(torch.randn(3, 5, 8))\n'
                                               ">>> assert _y.shape == (3, 5, 8), f'expected (3, 5, 8), got {tuple(_y.shape)}'\n",
                                       'failure_message': 'attention must map (B, T, C) to (B, T, C)',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> torch.manual_seed(0)\n'
                                               '>>> _att = CausalSelfAttention(ModelConfig(d_model=8, n_heads=2, max_len=16, dropout=0.0)).eval()\n'
                                               '>>> _x = torch.randn(2, 6, 8)\n'
                                               '>>> _x2 = _x.clone()\n'
                                               '>>> _x2[:, 3:] = torch.randn(2, 3, 8)\n'
                                               ">>> assert torch.allclose(_att(_x)[:, :3], _att(_x2)[:, :3], atol=1e-06), 'outputs 0..2 changed when only inputs 3..5 changed: apply the causal mask'\n"
                                               ">>> assert not torch.allclose(_att(_x)[:, 3:], _att(_x2)[:, 3:]), 'outputs 3..5 did not react to their own inputs'\n",
                                       'failure_message': 'position t must not see later positions: changing x[:, 3:] changed the output before t = 3',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
