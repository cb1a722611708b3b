from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_model"
points = None

@test_case(points=None, hidden=False, 
    failure_message="CausalLanguageModel on fixed weights (causal, eval mode), weight tying, embedding_dropout: the course grader's public cases")
def test_nb3_model_1(CausalLanguageModel, ModelConfig, embedding_dropout, CausalSelfAttention):
    from gradelib.notebook_check import check
    check('prediction', 'model_building', CausalLanguageModel=CausalLanguageModel, ModelConfig=ModelConfig, embedding_dropout=embedding_dropout, CausalSelfAttention=CausalSelfAttention)

