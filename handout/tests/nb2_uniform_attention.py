from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_uniform_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="uniform_attention: mean of the prefix: the course grader's public cases")
def test_nb2_uniform_attention_1(uniform_attention):
    from gradelib.notebook_check import check
    check('masks', 'uniform_attention', uniform_attention=uniform_attention)

