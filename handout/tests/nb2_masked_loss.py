from otter.test_files import test_case

OK_FORMAT = False

name = "nb2_masked_loss"
points = None

@test_case(points=None, hidden=False, 
    failure_message="mean of -log p(target) over the targets that are not pad_id")
def test_nb2_masked_loss_1(torch, masked_mean_loss):
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 30, generator=g, dtype=torch.float64)
    targets = torch.tensor([[5, 6, 0, 1], [7, 0, 1, 1]])
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1), ignore_index=1)
    got = masked_mean_loss(logits, targets, 1)
    assert got.dim() == 0, f'the loss must be a 0-dim tensor, got shape {tuple(got.shape)}'
    assert torch.allclose(got, want), f'got {got.item():.6f}, expected {want.item():.6f}: average over the non-pad targets only'

@test_case(points=None, hidden=False, 
    failure_message="padding invariance: appended <pad> targets must not change the loss")
def test_nb2_masked_loss_2(torch, masked_mean_loss):
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(1, 3, 30, generator=g, dtype=torch.float64)
    targets = torch.tensor([[4, 9, 0]])
    padded_logits = torch.cat([logits, torch.randn(1, 5, 30, generator=g, dtype=torch.float64) * 10], dim=1)
    padded_targets = torch.cat([targets, torch.full((1, 5), 1)], dim=1)
    assert torch.allclose(masked_mean_loss(logits, targets, 1), masked_mean_loss(padded_logits, padded_targets, 1)), 'adding padding must not change the loss'

@test_case(points=None, hidden=False, 
    failure_message="perplexity = exp(mean NLL per valid token), not exp of the sum")
def test_nb2_masked_loss_3(torch, perplexity):
    logits = torch.zeros(2, 3, 30, dtype=torch.float64)
    targets = torch.tensor([[3, 4, 1], [5, 1, 1]])
    ppl = perplexity(logits, targets, 1)
    assert torch.allclose(ppl, torch.tensor(30.0, dtype=torch.float64)), f'equal logits over 30 tokens must give perplexity 30, got {ppl}'

