from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_softmax"
points = None

@test_case(points=None, hidden=False, 
    failure_message="softmax over the last axis: the course grader's public cases")
def test_nb1_softmax_1(softmax):
    from gradelib.notebook_check import check
    check('losses', 'softmax', softmax=softmax)

@test_case(points=None, hidden=False, 
    failure_message="numerical stability: huge logits and scores (softmax, attention and the losses stay right): the course grader's public cases")
def test_nb1_softmax_2(softmax, env):
    from gradelib.notebook_check import check
    check('losses', 'numerical_stability', softmax=softmax, context=env)

