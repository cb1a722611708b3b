from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_predicted_ids"
points = None

@test_case(points=None, hidden=False, 
    failure_message="predicted_ids: arg-max over the vocabulary: the course grader's public cases")
def test_nb1_predicted_ids_1(predicted_ids):
    from gradelib.notebook_check import check
    check('losses', 'predicted_ids', predicted_ids=predicted_ids)

