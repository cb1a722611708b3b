from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_token_nll"
points = None

@test_case(points=None, hidden=False, 
    failure_message="token_nll[i] = -log softmax(logits[i])[target_ids[i]]")
def test_nb1_token_nll_1(np, token_nll):
    probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])
    nll = token_nll(np.log(probs), np.array([0, 2]))
    assert np.shape(nll) == (2,), f'expected one loss per position, shape (2,), got {np.shape(nll)}'
    assert np.allclose(nll, [-np.log(0.5), -np.log(0.8)])

@test_case(points=None, hidden=False, 
    failure_message="use the max-subtracted log-softmax")
def test_nb1_token_nll_2(np, softmax, token_nll):
    nll = token_nll(np.array([[1000.0, 0.0]]), np.array([1]))
    assert np.isfinite(nll).all(), 'the loss is infinite: compute the log-softmax directly instead of np.log(softmax(...))'
    assert np.allclose(nll, [1000.0])

