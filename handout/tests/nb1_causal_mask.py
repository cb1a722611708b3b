from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_causal_mask"
points = None

@test_case(points=None, hidden=False, 
    failure_message="M[i, j] = 0 for j <= i and -inf for j > i")
def test_nb1_causal_mask_1(np, causal_mask):
    m = causal_mask(3)
    assert np.shape(m) == (3, 3), f'expected shape (3, 3), got {np.shape(m)}'
    assert np.all(np.diag(m) == 0), 'the diagonal must be 0: a position may attend to itself'
    assert np.array_equal(m, [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]]), '0 on and below the diagonal, -inf strictly above'

@test_case(points=None, hidden=False, 
    failure_message="the causal mask must block exactly the future")
def test_nb1_causal_mask_2(np, scaled_dot_product_attention, causal_mask):
    w, _ = scaled_dot_product_attention(np.eye(4), np.eye(4), np.ones((4, 2)), causal_mask(4))
    assert not np.isnan(w).any() and np.allclose(np.triu(w, k=1), 0), 'with the causal mask no position may attend to a later one'

