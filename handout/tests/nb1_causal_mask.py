from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_causal_mask"
points = None

@test_case(points=None, hidden=False, 
    failure_message="causal_mask: 0 on and below the diagonal, -inf above: the course grader's public cases")
def test_nb1_causal_mask_1(causal_mask):
    from gradelib.notebook_check import check
    check('losses', 'causal_mask', causal_mask=causal_mask)

