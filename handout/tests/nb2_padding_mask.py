from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_padding_mask"
points = None

@test_case(points=None, hidden=False, 
    failure_message="padding_mask: True on real tokens: the course grader's public cases")
def test_nb2_padding_mask_1(padding_mask):
    from gradelib.notebook_check import check
    check('masks', 'padding_mask', padding_mask=padding_mask)

@test_case(points=None, hidden=False, 
    failure_message="combined_mask: causal and key padding: the course grader's public cases")
def test_nb2_padding_mask_2(combined_mask, padding_mask, causal_mask):
    from gradelib.notebook_check import check
    check('masks', 'combined_mask', combined_mask=combined_mask, padding_mask=padding_mask, causal_mask=causal_mask)

