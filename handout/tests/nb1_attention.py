from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="weights must be (Tq, Tk) with rows summing to 1; output must be (Tq, d_v)")
def test_nb1_attention_1(np, scaled_dot_product_attention):
    Q = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    K = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    w, out = scaled_dot_product_attention(Q, K, V)
    assert w.shape == (2, 3) and out.shape == (2, 2), f'expected weights (2, 3) and output (2, 2), got {w.shape} and {out.shape}'
    assert np.allclose(w.sum(axis=-1), 1.0), 'each row of the weights must sum to 1 over the keys'

@test_case(points=None, hidden=False, 
    failure_message="scores are Q K^T / sqrt(d_k); the output is weights @ V")
def test_nb1_attention_2(np, scaled_dot_product_attention):
    Q = K = np.array([[1.0, 0.0], [0.0, 1.0]])
    V = np.array([[1.0, 2.0], [3.0, 4.0]])
    w, out = scaled_dot_product_attention(Q, K, V)
    a = np.exp(1 / np.sqrt(2))
    assert np.allclose(w, [[a / (a + 1), 1 / (a + 1)], [1 / (a + 1), a / (a + 1)]]), 'did you divide the scores by sqrt(d_k)?'
    assert np.allclose(out, w @ V)

@test_case(points=None, hidden=False, 
    failure_message="add the mask to the scores before the softmax")
def test_nb1_attention_3(np, scaled_dot_product_attention):
    Q = K = np.eye(3)
    V = np.arange(6.0).reshape(3, 2)
    blocked = np.array([[0.0, -np.inf, -np.inf], [0.0, 0.0, -np.inf], [0.0, 0.0, 0.0]])
    w, out = scaled_dot_product_attention(Q, K, V, blocked)
    assert np.allclose(w[0], [1.0, 0.0, 0.0]) and np.all(w[1, 2:] == 0), 'keys masked with -inf must get zero weight'

