OK_FORMAT = True

test = {   'name': 'nb3_model',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> _w = torch.ones(1000, 4)\n'
                                               '>>> torch.manual_seed(0)\n'
                                               '>>> _d = embedding_dropout(_w, 0.5, True)\n'
                                               '>>> _rows = set(torch.unique(_d, dim=0)[:, 0].tolist())\n'
                                               ">>> assert _rows <= {0.0, 2.0}, f'kept rows must be scaled by 1/(1-p) = 2 and dropped rows be 0; row values seen: {sorted(_rows)}'\n"
                                               ">>> assert bool((_d == _d[:, :1]).all()), 'a row must be dropped or kept as a whole'\n"
                                               ">>> assert 350 < int((_d[:, 0] == 0).sum()) < 650, 'about half the rows should be dropped at p = 0.5'\n"
                                               ">>> assert embedding_dropout(_w, 0.5, False) is _w, 'at eval time (training=False) return the weight unchanged'\n",
                                       'failure_message': 'embedding_dropout must zero whole rows, scale kept rows by 1/(1-p), and do nothing at eval time',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> torch.manual_seed(0)\n'
                                               '>>> _m = CausalLanguageModel(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32)).eval()\n'
                                               '>>> _out = _m(torch.randint(0, VOCAB_SIZE, (2, 7)))\n'
                                               ">>> assert _out.shape == (2, 7, VOCAB_SIZE), f'expected (2, 7, 30), got {tuple(_out.shape)}'\n"
                                               '>>> assert _m.fc.weight is _m.token_embedding.weight, "fc.weight must be the embedding\'s Parameter object (weight tying)"\n',
                                       'failure_message': 'the model must return (B, T, 30) logits and tie fc.weight to token_embedding.weight',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> torch.manual_seed(0)\n'
                                               '>>> _m = CausalLanguageModel(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32)).eval()\n'
                                               '>>> _a = torch.randint(2, VOCAB_SIZE, (2, 9))\n'
                                               '>>> _b = _a.clone()\n'
                                               '>>> _b[:, 5:] = torch.randint(2, VOCAB_SIZE, (2, 4))\n'
                                               ">>> assert torch.allclose(_m(_a)[:, :5], _m(_b)[:, :5], atol=1e-05), 'changing tokens 5..8 changed the logits at positions 0..4'\n",
                                       'failure_message': 'logits at position t must not depend on tokens after t',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
