from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_predict"
points = None

@test_case(points=None, hidden=False, 
    failure_message="predict(): raw logits of each step after the greedy picks of the earlier steps; the model's mode restored: the course grader's public cases")
def test_nb3_predict_1(predict):
    from gradelib.notebook_check import check
    check('prediction', 'predict_function', predict=predict)

