from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_generate"
points = None

@test_case(points=None, hidden=False, 
    failure_message="generate must return (B, timesteps) int64 ids: greedy by default, never EOS or PAD")
def test_nb3_generate_1(torch, nn, F, generate, VOCAB_SIZE, EOS, PAD):

    class LovesEos(nn.Module):

        def forward(self, inp):
            nxt = torch.where(inp + 1 > 27, torch.full_like(inp, 2), inp + 1)
            logits = F.one_hot(nxt, VOCAB_SIZE).float() * 4.0
            logits[..., EOS] = 9.0
            logits[..., PAD] = 8.0
            return logits
    g = generate(LovesEos(), torch.tensor([[EOS, 2], [EOS, 26]]), 3)
    assert tuple(g.shape) == (2, 3) and g.dtype == torch.long, f'expected a (2, 3) int64 tensor, got {tuple(g.shape)} {g.dtype}'
    assert g.tolist() == [[3, 4, 5], [27, 2, 3]], f'expected [[3, 4, 5], [27, 2, 3]] (greedy without EOS/PAD), got {g.tolist()}'

@test_case(points=None, hidden=False, 
    failure_message="with sampling, top_k=1 must give the greedy choice and tokens must stay inside the top_k")
def test_nb3_generate_2(torch, nn, F, generate, filter_logits, VOCAB_SIZE, EOS, PAD):

    class LovesEos(nn.Module):

        def forward(self, inp):
            nxt = torch.where(inp + 1 > 27, torch.full_like(inp, 2), inp + 1)
            logits = F.one_hot(nxt, VOCAB_SIZE).float() * 4.0
            logits[..., EOS] = 9.0
            logits[..., PAD] = 8.0
            return logits
    logits = torch.randn(64, VOCAB_SIZE, generator=torch.Generator().manual_seed(0))
    kept = filter_logits(logits, 1.0, 3, None)
    assert (torch.isfinite(kept).sum(-1) == 3).all(), 'top_k=3 must leave exactly 3 finite logits per row'
    assert not torch.isfinite(kept[:, [EOS, PAD]]).any(), 'EOS and PAD must be -inf'
    g = generate(LovesEos(), torch.tensor([[EOS, 2]] * 8), 3, temperature=1.0, top_k=1)
    assert (g == torch.tensor([3, 4, 5])).all(), f'top_k=1 sampling must equal greedy, got {g.tolist()}'

