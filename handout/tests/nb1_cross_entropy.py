from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_cross_entropy"
points = None

@test_case(points=None, hidden=False, 
    failure_message="skip positions whose target is ignore_index, and divide by the number of scored positions")
def test_nb1_cross_entropy_1(np, cross_entropy_loss):
    probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]])
    loss = cross_entropy_loss(np.log(probs), np.array([0, -100, 2]))
    assert np.ndim(loss) == 0, f'the loss must be a scalar, got shape {np.shape(loss)}'
    assert np.isclose(loss, -(np.log(0.5) + np.log(0.6)) / 2), 'average over the scored positions only (here 2 of 3)'

@test_case(points=None, hidden=False, 
    failure_message="use the ignore_index argument, not a hard-coded -100")
def test_nb1_cross_entropy_2(np, cross_entropy_loss):
    probs = np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]])
    assert np.isclose(cross_entropy_loss(np.log(probs), np.array([7, 2]), ignore_index=7), -np.log(0.8))

