from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_collate"
points = None

@test_case(points=None, hidden=False, 
    failure_message="collate must return (inputs, targets), two (B, T) int64 tensors with T = longest piece - 1")
def test_nb3_collate_1(torch, collate):
    x, y = collate([torch.tensor([0, 5, 6, 7]), torch.tensor([8, 9])])
    assert x.shape == (2, 3) and y.shape == (2, 3), f'expected two (2, 3) tensors, got {tuple(x.shape)} and {tuple(y.shape)}'
    assert x.dtype == torch.long and y.dtype == torch.long, f'expected int64, got {x.dtype} and {y.dtype}'

@test_case(points=None, hidden=False, 
    failure_message="inputs are piece[:-1], targets are piece[1:], and the rest is PAD")
def test_nb3_collate_2(torch, collate, PAD):
    x, y = collate([torch.tensor([0, 5, 6, 7]), torch.tensor([8, 9])])
    assert x.tolist() == [[0, 5, 6], [8, PAD, PAD]], f'inputs: expected [[0, 5, 6], [8, PAD, PAD]], got {x.tolist()}'
    assert y.tolist() == [[5, 6, 7], [9, PAD, PAD]], f'targets: expected [[5, 6, 7], [9, PAD, PAD]], got {y.tolist()}'

