from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="attention without a mask: the course grader's public cases")
def test_nb2_attention_1(attention):
    from gradelib.notebook_check import check
    check('masks', 'attention', attention=attention)

@test_case(points=None, hidden=False, 
    failure_message="attention with a boolean mask, fully masked rows give zeros: the course grader's public cases")
def test_nb2_attention_2(attention):
    from gradelib.notebook_check import check
    check('masks', 'masked_attention', attention=attention)

