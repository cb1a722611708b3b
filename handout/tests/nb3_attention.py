from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="CausalSelfAttention: masked multi-head attention on fixed weights, outputs unchanged by later inputs: the course grader's public cases")
def test_nb3_attention_1(CausalSelfAttention, ModelConfig):
    from gradelib.notebook_check import check
    check('prediction', 'causal_attention', CausalSelfAttention=CausalSelfAttention, ModelConfig=ModelConfig)

