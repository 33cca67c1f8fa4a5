# bench/peers/torch_model.py — examples/gpt.tg's gpt2-124m in PyTorch, shared by bench/peers/torch_gpt2.py (CPU)
# and bench/gpu/torch_gpt2.py (GPU): learned positions, pre-LN (eps 1e-5), fused qkv with bias, causal attention
# (F.scaled_dot_product_attention, is_causal) scaled by 1/sqrt(64), GELU tanh, tied LM head, mean cross-entropy
# (over f32 logits). gpt2(B, T) is the model for B sequences of T tokens.
import math
import torch, torch.nn as nn, torch.nn.functional as F

V, ctx, L, H, D = 50257, 1024, 12, 12, 768

def gpt2(B, T):
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
            logits = s.ln_f(x) @ s.wte.weight.T                      # tied head
            return F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))

    return GPT()
