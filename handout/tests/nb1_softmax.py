from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_softmax"
points = None

@test_case(points=None, hidden=False, 
    failure_message="softmax must return an array of the input's shape whose rows (last axis) sum to 1")
def test_nb1_softmax_1(np, softmax):
    p = softmax(np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]))
    assert p.shape == (2, 3), f"softmax must keep the input's shape (2, 3), got {p.shape}"
    assert np.allclose(p.sum(axis=-1), 1.0), f'each row must sum to 1, got row sums {p.sum(axis=-1)}'

@test_case(points=None, hidden=False, 
    failure_message="softmax([1, 2, 3]) should be exp([1, 2, 3]) / sum(exp([1, 2, 3]))")
def test_nb1_softmax_2(np, softmax):
    e = np.exp([1.0, 2.0, 3.0])
    assert np.allclose(softmax(np.array([[1.0, 2.0, 3.0]])), e / e.sum())

@test_case(points=None, hidden=False, 
    failure_message="large logits overflow np.exp: subtract each row's max first")
def test_nb1_softmax_3(np, softmax):
    p = softmax(np.array([[1000.0, 1000.0], [-1000.0, 0.0]]))
    assert not np.isnan(p).any(), "softmax returned NaN for logits of size 1000: subtract each row's max before np.exp"
    assert np.allclose(p, [[0.5, 0.5], [0.0, 1.0]])

