from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_predicted_ids"
points = None

@test_case(points=None, hidden=False, 
    failure_message="take the arg-max over the last (vocabulary) axis")
def test_nb1_predicted_ids_1(np, predicted_ids):
    ids = predicted_ids(np.array([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]]))
    assert np.shape(ids) == (2,), f'expected one id per position, shape (2,), got {np.shape(ids)}: check the axis of the arg-max'
    assert list(ids) == [1, 0]

