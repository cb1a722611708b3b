from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_loss"
points = None

@test_case(points=None, hidden=False, 
    failure_message="collate(): shifted inputs and targets padded with <pad>; lm_loss(): mean NLL over non-<pad> targets: the course grader's public cases")
def test_nb3_loss_1(lm_loss):
    from gradelib.notebook_check import check
    check('prediction', 'collate_and_loss', lm_loss=lm_loss)

