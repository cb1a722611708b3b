OK_FORMAT = True

test = {   'name': 'nb3_collate',
    'points': None,
    'suites': [   {   'cases': [   {   'code': '>>> x, y = collate([torch.tensor([0, 5, 6, 7]), torch.tensor([8, 9])])\n'
                                               ">>> assert x.shape == (2, 3) and y.shape == (2, 3), f'expected two (2, 3) tensors, got {tuple(x.shape)} and {tuple(y.shape)}'\n"
                                               ">>> assert x.dtype == torch.long and y.dtype == torch.long, f'expected int64, got {x.dtype} and {y.dtype}'\n",
                                       'failure_message': 'collate must return (inputs, targets), two (B, T) int64 tensors with T = longest piece - 1',
                                       'hidden': False,
                                       'locked': False},
                                   {   'code': '>>> x, y = collate([torch.tensor([0, 5, 6, 7]), torch.tensor([8, 9])])\n'
                                               ">>> assert x.tolist() == [[0, 5, 6], [8, PAD, PAD]], f'inputs: got {x.tolist()}'\n"
                                               ">>> assert y.tolist() == [[5, 6, 7], [9, PAD, PAD]], f'targets: got {y.tolist()}'\n",
                                       'failure_message': 'inputs are piece[:-1], targets are piece[1:], and the rest is PAD',
                                       'hidden': False,
                                       'locked': False}],
                      'scored': True,
                      'setup': '',
                      'teardown': '',
                      'type': 'doctest'}]}
