from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_generate"
points = None

@test_case(points=None, hidden=False, 
    failure_message="generate(): greedy by default and at temperature 0, never <eos>/<pad>; the model's mode restored: the course grader's public cases")
def test_nb3_generate_1(generate):
    from gradelib.notebook_check import check
    check('generation', 'generate_greedy', generate=generate)

@test_case(points=None, hidden=False, 
    failure_message="generate(): temperature, top_k (ties kept) and top_p (the crossing token kept) sampling: the course grader's public cases")
def test_nb3_generate_2(generate):
    from gradelib.notebook_check import check
    check('generation', 'generate_sampling', generate=generate)

