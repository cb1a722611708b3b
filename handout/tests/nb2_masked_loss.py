from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_masked_loss"
points = None

@test_case(points=None, hidden=False, 
    failure_message="masked_mean_loss: mean NLL over non-pad targets: the course grader's public cases")
def test_nb2_masked_loss_1(masked_mean_loss):
    from gradelib.notebook_check import check
    check('masks', 'masked_mean_loss', masked_mean_loss=masked_mean_loss)

@test_case(points=None, hidden=False, 
    failure_message="perplexity: exp of the mean NLL per valid token: the course grader's public cases")
def test_nb2_masked_loss_2(perplexity, masked_mean_loss):
    from gradelib.notebook_check import check
    check('masks', 'perplexity', perplexity=perplexity, masked_mean_loss=masked_mean_loss)

