from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_loss"
points = None

@test_case(points=None, hidden=False, 
    failure_message="uniform logits over 30 tokens give a loss of log(30) whatever the targets")
def test_nb3_loss_1(torch, math, lm_loss, VOCAB_SIZE):
    loss = lm_loss(torch.zeros(2, 3, VOCAB_SIZE), torch.tensor([[2, 3, 4], [5, 6, 7]]))
    assert abs(float(loss) - math.log(VOCAB_SIZE)) < 1e-05, f'expected log(30) = {math.log(30):.5f}, got {float(loss):.5f}'

@test_case(points=None, hidden=False, 
    failure_message="PAD targets must not count: average over the other positions only")
def test_nb3_loss_2(torch, lm_loss, VOCAB_SIZE, PAD):
    logits = torch.zeros(1, 3, VOCAB_SIZE)
    logits[0, 0, 2] = 5.0
    loss = lm_loss(logits, torch.tensor([[2, PAD, PAD]]))
    expected = -torch.log_softmax(logits[0, 0], -1)[2]
    assert abs(float(loss) - float(expected)) < 1e-05, f'expected {float(expected):.5f} (one real target), got {float(loss):.5f}'

