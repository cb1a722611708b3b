from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_token_nll"
points = None

@test_case(points=None, hidden=False, 
    failure_message="token_nll: -log p(target) per position: the course grader's public cases")
def test_nb1_token_nll_1(token_nll):
    from gradelib.notebook_check import check
    check('losses', 'token_nll', token_nll=token_nll)

@test_case(points=None, hidden=False, 
    failure_message="numerical stability: huge logits and scores (softmax, attention and the losses stay right): the course grader's public cases")
def test_nb1_token_nll_2(token_nll, env):
    from gradelib.notebook_check import check
    check('losses', 'numerical_stability', token_nll=token_nll, context=env)

