from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_padding_mask"
points = None

@test_case(points=None, hidden=False, 
    failure_message="padding_mask is True where the token is not pad_id")
def test_nb2_padding_mask_1(torch, padding_mask):
    tokens = torch.tensor([[0, 5, 6, 0, 1, 1], [0, 7, 0, 1, 1, 1]])
    p = padding_mask(tokens, 1)
    assert p.dtype == torch.bool and p.shape == (2, 6), f'expected a (2, 6) bool tensor, got {tuple(p.shape)} {p.dtype}'
    assert torch.equal(p, tokens != 1), 'True exactly where the token is not pad_id'

@test_case(points=None, hidden=False, 
    failure_message="combine the causal mask with the padding mask on the key (last) axis")
def test_nb2_padding_mask_2(torch, combined_mask):
    tokens = torch.tensor([[0, 5, 6, 0, 1, 1]])
    m = combined_mask(tokens, 1)
    assert m.shape == (1, 6, 6) and m.dtype == torch.bool, f'expected a (1, 6, 6) bool tensor, got {tuple(m.shape)} {m.dtype}'
    assert not m[0, :, 4:].any(), 'no query may attend to a padded key (columns 4 and 5)'
    assert m[0, 5, :4].all(), 'a padded query still sees the real tokens before it: padding masks keys, not queries'
    assert not m[0, 2, 3], 'the causal part still blocks the future'

