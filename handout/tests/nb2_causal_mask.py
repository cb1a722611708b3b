from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_causal_mask"
points = None

@test_case(points=None, hidden=False, 
    failure_message="causal_mask: boolean lower triangle: the course grader's public cases")
def test_nb2_causal_mask_1(causal_mask):
    from gradelib.notebook_check import check
    check('masks', 'causal_mask', causal_mask=causal_mask)

