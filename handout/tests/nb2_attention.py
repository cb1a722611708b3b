from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="A is (B, Tq, Tk) with rows summing to 1, C = A @ V is (B, Tq, Dv)")
def test_nb2_attention_1(torch, attention):
    Q = torch.randn(2, 3, 4, dtype=torch.float64)
    K = torch.randn(2, 5, 4, dtype=torch.float64)
    V = torch.randn(2, 5, 6, dtype=torch.float64)
    A, C = attention(Q, K, V)
    assert A.shape == (2, 3, 5) and C.shape == (2, 3, 6), f'expected A (2, 3, 5) and C (2, 3, 6), got {tuple(A.shape)} and {tuple(C.shape)}'
    assert torch.allclose(A.sum(-1), torch.ones(2, 3, dtype=torch.float64)), 'rows of A must sum to 1 over the keys'
    assert torch.allclose(C, A @ V)

@test_case(points=None, hidden=False, 
    failure_message="scores are Q K^T / sqrt(D)")
def test_nb2_attention_2(torch, math, attention):
    Q = K = torch.eye(2, dtype=torch.float64)[None]
    V = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]], dtype=torch.float64)
    A, _ = attention(Q, K, V)
    a = math.exp(1 / math.sqrt(2))
    assert torch.allclose(A[0, 0], torch.tensor([a / (a + 1), 1 / (a + 1)], dtype=torch.float64)), 'scale the scores by 1/sqrt(D)'

@test_case(points=None, hidden=False, 
    failure_message="mask with -inf before the softmax; rows with no allowed key are all zeros")
def test_nb2_attention_3(torch, attention):
    Q = torch.randn(1, 3, 2, dtype=torch.float64)
    K = torch.randn(1, 3, 2, dtype=torch.float64)
    V = torch.randn(1, 3, 2, dtype=torch.float64)
    allowed = torch.tensor([[[True, False, True], [False, False, False], [True, True, True]]])
    A, C = attention(Q, K, V, allowed)
    assert not torch.isnan(A).any() and (not torch.isnan(C).any()), 'a fully masked row must not produce NaN'
    assert torch.all(A[~allowed] == 0), 'blocked keys must get weight exactly 0'
    assert torch.allclose(A[0, 0].sum(), torch.tensor(1.0, dtype=torch.float64)), 'a row sums to 1 over its allowed keys'
    assert torch.all(A[0, 1] == 0) and torch.all(C[0, 1] == 0), 'a query with no allowed key gets zeros in A and in C'

