from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_causal_mask"
points = None

@test_case(points=None, hidden=False, 
    failure_message="mask[i, j] = (j <= i), dtype torch.bool")
def test_nb2_causal_mask_1(torch, causal_mask):
    m = causal_mask(3)
    assert m.dtype == torch.bool, f'the mask must be boolean, got {m.dtype}'
    assert torch.equal(m, torch.tensor([[True, False, False], [True, True, False], [True, True, True]])), 'True on and below the diagonal'

