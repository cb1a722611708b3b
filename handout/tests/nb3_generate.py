OK_FORMAT = True

test = {   'name': 'nb3_generate',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> class _LovesEos(nn.Module):\n'
                                               '...     def forward(self, inp):\n'
                                               '...         nxt = torch.where(inp + 1 > 27, torch.full_like(inp, 2), inp + 1)\n'
                                               '...         logits = F.one_hot(nxt, VOCAB_SIZE).float() * 4.0\n'
                                               '...         logits[..., EOS] = 9.0\n'
                                               '...         logits[..., PAD] = 8.0\n'
                                               '...         return logits\n'
                                               '>>> _g = generate(_LovesEos(), torch.tensor([[EOS, 2], [EOS, 26]]), 3)\n'
                                               ">>> assert tuple(_g.shape) == (2, 3) and _g.dtype == torch.long, f'expected a (2, 3) int64 tensor, got {tuple(_g.shape)} {_g.dtype}'\n"
                                               ">>> assert _g.tolist() == [[3, 4, 5], [27, 2, 3]], f'expected [[3, 4, 5], [27, 2, 3]] (greedy without EOS/PAD), got {_g.tolist()}'\n",
                                       'failure_message': 'generate must return (B, timesteps) int64 ids: greedy by default, never EOS or PAD',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> torch.manual_seed(0)\n'
                                               '>>> _logits = torch.randn(64, VOCAB_SIZE)\n'
                                               '>>> _kept = filter_logits(_logits, 1.0, 3, None)\n'
                                               ">>> assert (torch.isfinite(_kept).sum(-1) == 3).all(), 'top_k=3 must leave exactly 3 finite logits per row'\n"
                                               ">>> assert not torch.isfinite(_kept[:, [EOS, PAD]]).any(), 'EOS and PAD must be -inf'\n"
                                               '>>> _g = generate(_LovesEos(), torch.tensor([[EOS, 2]] * 8), 3, temperature=1.0, top_k=1)\n'
                                               ">>> assert (_g == torch.tensor([3, 4, 5])).all(), f'top_k=1 sampling must equal greedy, got {_g.tolist()}'\n",
                                       'failure_message': 'with sampling, top_k=1 must give the greedy choice and tokens must stay inside the top_k',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
