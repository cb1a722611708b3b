from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_attention"
points = None

@test_case(points=None, hidden=False, 
    failure_message="attention must map (B, T, C) to (B, T, C)")
def test_nb3_attention_1(torch, CausalSelfAttention, ModelConfig):
    torch.manual_seed(0)
    att = CausalSelfAttention(ModelConfig(d_model=8, n_heads=2, max_len=16, dropout=0.0)).eval()
    y = att(torch.randn(3, 5, 8))
    assert y.shape == (3, 5, 8), f'expected (3, 5, 8), got {tuple(y.shape)}'

@test_case(points=None, hidden=False, 
    failure_message="position t must not see later positions: changing x[:, 3:] must leave the outputs before t = 3 unchanged")
def test_nb3_attention_2(torch, CausalSelfAttention, ModelConfig):
    torch.manual_seed(0)
    att = CausalSelfAttention(ModelConfig(d_model=8, n_heads=2, max_len=16, dropout=0.0)).eval()
    x = torch.randn(2, 6, 8)
    x2 = x.clone()
    x2[:, 3:] = torch.randn(2, 3, 8)
    assert torch.allclose(att(x)[:, :3], att(x2)[:, :3], atol=1e-06), 'outputs 0..2 changed when only inputs 3..5 changed: apply the causal mask'
    assert not torch.allclose(att(x)[:, 3:], att(x2)[:, 3:]), 'outputs 3..5 did not react to their own inputs'

