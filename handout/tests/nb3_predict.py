from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_predict"
points = None

@test_case(points=None, hidden=False, 
    failure_message="predict must return (B, timesteps, 30) logits whose step t follows the greedy picks of steps < t")
def test_nb3_predict_1(torch, nn, F, predict, VOCAB_SIZE, EOS):

    class NextLetter(nn.Module):

        def forward(self, inp):
            nxt = torch.where(inp + 1 > 27, torch.full_like(inp, 2), inp + 1)
            return F.one_hot(nxt, VOCAB_SIZE).float() * 4.0
    p = predict(NextLetter(), torch.tensor([[EOS, 2, 3]]), 4)
    assert tuple(p.shape) == (1, 4, VOCAB_SIZE), f'expected (1, 4, 30), got {tuple(p.shape)}'
    assert p.argmax(-1).tolist() == [[4, 5, 6, 7]], f'expected the picks C D E F (ids 4..7), got ids {p.argmax(-1).tolist()}'

