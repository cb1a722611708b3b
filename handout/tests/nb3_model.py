from otter.test_files import test_case

OK_FORMAT = False

name = "nb3_model"
points = None

@test_case(points=None, hidden=False, 
    failure_message="embedding_dropout must zero whole rows, scale kept rows by 1/(1-p), and do nothing at eval time")
def test_nb3_model_1(torch, embedding_dropout):
    w = torch.ones(1000, 4)
    torch.manual_seed(0)
    d = embedding_dropout(w, 0.5, True)
    rows = set(torch.unique(d, dim=0)[:, 0].tolist())
    assert rows <= {0.0, 2.0}, f'kept rows must be scaled by 1/(1-p) = 2 and dropped rows be 0; row values seen: {sorted(rows)}'
    assert bool((d == d[:, :1]).all()), 'a row must be dropped or kept as a whole'
    assert 350 < int((d[:, 0] == 0).sum()) < 650, 'about half the rows should be dropped at p = 0.5'
    assert embedding_dropout(w, 0.5, False) is w, 'at eval time (training=False) return the weight unchanged'

@test_case(points=None, hidden=False, 
    failure_message="the model must return (B, T, 30) logits and tie fc.weight to token_embedding.weight")
def test_nb3_model_2(torch, CausalLanguageModel, ModelConfig, VOCAB_SIZE):
    torch.manual_seed(0)
    m = CausalLanguageModel(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32)).eval()
    out = m(torch.randint(0, VOCAB_SIZE, (2, 7)))
    assert out.shape == (2, 7, VOCAB_SIZE), f'expected (2, 7, 30), got {tuple(out.shape)}'
    assert m.fc.weight is m.token_embedding.weight, "fc.weight must be the embedding's Parameter object (weight tying)"

@test_case(points=None, hidden=False, 
    failure_message="logits at position t must not depend on tokens after t")
def test_nb3_model_3(torch, CausalLanguageModel, ModelConfig, VOCAB_SIZE):
    torch.manual_seed(0)
    m = CausalLanguageModel(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=32)).eval()
    a = torch.randint(2, VOCAB_SIZE, (2, 9))
    b = a.clone()
    b[:, 5:] = torch.randint(2, VOCAB_SIZE, (2, 4))
    assert torch.allclose(m(a)[:, :5], m(b)[:, :5], atol=1e-05), 'changing tokens 5..8 changed the logits at positions 0..4'

