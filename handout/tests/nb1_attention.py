from otter.test_files import test_case

OK_FORMAT = False

name = "nb1_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="scaled_dot_product_attention without a mask: the course grader's public cases")
def test_nb1_attention_1(scaled_dot_product_attention, softmax):
    from gradelib.notebook_check import check
    check('losses', 'attention', scaled_dot_product_attention=scaled_dot_product_attention, softmax=softmax)

@test_case(points=None, hidden=False, 
    failure_message="scaled_dot_product_attention with an additive mask: the course grader's public cases")
def test_nb1_attention_2(scaled_dot_product_attention, softmax):
    from gradelib.notebook_check import check
    check('losses', 'masked_attention', scaled_dot_product_attention=scaled_dot_product_attention, softmax=softmax)

@test_case(points=None, hidden=False, 
    failure_message="numerical stability: huge logits and scores (softmax, attention and the losses stay right): the course grader's public cases")
def test_nb1_attention_3(scaled_dot_product_attention, env):
    from gradelib.notebook_check import check
    check('losses', 'numerical_stability', scaled_dot_product_attention=scaled_dot_product_attention, context=env)

