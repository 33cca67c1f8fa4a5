# bench/gpu/torch_gpt2.py — the GPT-2 124M training step of bench/gpu.sh in PyTorch on a GPU, for a
# side-by-side figure with tgc --backend cuda in the same call (bench/gpu/run.sh). Nothing here is a test.
#   python3 torch_gpt2.py eager|compile STEPS B T
# The model of examples/gpt.tg --config gpt2_124m: learned positions, pre-LN (eps 1e-5), fused qkv with
# bias, causal attention (F.scaled_dot_product_attention), GELU tanh, tied LM head, mean cross-entropy.
# bf16 autocast over f32 master weights (tgc --dtype bf16 likewise), fused AdamW (lr 3e-4). Random tokens.
# Prints one line: mode, median step time after 5 warm-up steps, tokens/s, and the first step's time.
import math, statistics, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
mode, steps, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
V, ctx, L, H, D = 50257, 1024, 12, 12, 768
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln_1, s.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        s.c_attn, s.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        s.c_fc, s.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
    def forward(s, x):
        q, k, v = s.c_attn(s.ln_1(x)).split(D, dim=2)
        hd = lambda t: t.view(B, T, H, D // H).transpose(1, 2)
        y = F.scaled_dot_product_attention(hd(q), hd(k), hd(v), is_causal=True)
        x = x + s.c_proj(y.transpose(1, 2).reshape(B, T, D))
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate='tanh'))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, D), nn.Embedding(ctx, D)
        s.h = nn.ModuleList(Block() for _ in range(L)); s.ln_f = nn.LayerNorm(D)
        for n, p in s.named_parameters():
            if p.dim() == 2: nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if 'proj' in n else 0.02)
            elif n.endswith('bias'): nn.init.zeros_(p)
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(T, device=idx.device))
        for b in s.h: x = b(x)
        logits = s.ln_f(x) @ s.wte.weight.T
        return F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))

dev = 'cuda'
model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0, fused=True)
fwd = torch.compile(model) if mode == 'compile' else model
g = torch.Generator(device=dev).manual_seed(0)
times = []
for i in range(steps):
    x = torch.randint(0, V, (B, T), device=dev, generator=g); y = torch.randint(0, V, (B, T), device=dev, generator=g)
    torch.cuda.synchronize(); t0 = time.perf_counter()
    with torch.autocast('cuda', dtype=torch.bfloat16):
        loss = fwd(x, y)
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    loss.item(); times.append(time.perf_counter() - t0)
med = statistics.median(times[5:])
print(f'torch {mode:8s} {torch.__version__}: step {med * 1e3:.2f} ms (median of {len(times) - 5}), '
      f'{B * T / med:.0f} tokens/s, first step {times[0]:.2f} s, loss {loss.item():.3f}')
