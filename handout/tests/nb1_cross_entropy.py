from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_cross_entropy"
points = None

@test_case(points=None, hidden=False, 
    failure_message="cross_entropy_loss: mean over positions not ignored: the course grader's public cases")
def test_nb1_cross_entropy_1(cross_entropy_loss, token_nll):
    from gradelib.notebook_check import check
    check('losses', 'cross_entropy_loss', cross_entropy_loss=cross_entropy_loss, token_nll=token_nll)

@test_case(points=None, hidden=False, 
    failure_message="numerical stability: huge logits and scores (softmax, attention and the losses stay right): the course grader's public cases")
def test_nb1_cross_entropy_2(cross_entropy_loss, env):
    from gradelib.notebook_check import check
    check('losses', 'numerical_stability', cross_entropy_loss=cross_entropy_loss, context=env)

