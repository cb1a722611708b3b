from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_uniform_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="H[b, t] is the mean of X[b, 0], ..., X[b, t]")
def test_nb2_uniform_attention_1(torch, uniform_attention):
    X = torch.tensor([[[2.0, 0.0], [4.0, 2.0], [0.0, 4.0]]])
    H = uniform_attention(X)
    assert H.shape == (1, 3, 2), f'expected shape (1, 3, 2), got {tuple(H.shape)}'
    assert torch.allclose(H, torch.tensor([[[2.0, 0.0], [3.0, 1.0], [2.0, 2.0]]])), 'H[t] must be the mean of X[0..t]'

@test_case(points=None, hidden=False, 
    failure_message="works per batch element and keeps float64")
def test_nb2_uniform_attention_2(torch, uniform_attention):
    X = torch.randn(2, 5, 3, dtype=torch.float64)
    H = uniform_attention(X)
    assert H.dtype == torch.float64, f"keep the input's dtype, got {H.dtype}"
    assert torch.allclose(H[1, 4], X[1].mean(dim=0)), 'the last position averages the whole sequence'

