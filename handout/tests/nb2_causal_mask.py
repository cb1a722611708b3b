OK_FORMAT = True

test = {   'name': 'nb2_causal_mask',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> m = causal_mask(3)\n'
                                               ">>> assert m.dtype == torch.bool, f'the mask must be boolean, got {m.dtype}'\n"
                                               ">>> assert torch.equal(m, torch.tensor([[True, False, False], [True, True, False], [True, True, True]])), 'True on and below the diagonal'\n",
                                       'failure_message': 'mask[i, j] = (j <= i), dtype torch.bool',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
