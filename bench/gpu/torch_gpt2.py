# bench/gpu/torch_gpt2.py — the GPT-2 124M training step of bench/gpu.sh in PyTorch on a GPU, for a
# side-by-side figure with tgc --backend cuda in the same call (bench/gpu/run.sh). Nothing here is a test.
#   python3 torch_gpt2.py eager|compile STEPS B T
# The model of examples/gpt.tg --config gpt2_124m: learned positions, pre-LN (eps 1e-5), fused qkv with
# bias, causal attention (F.scaled_dot_product_attention), GELU tanh, tied LM head, mean cross-entropy.
# bf16 autocast over f32 master weights (tgc --dtype bf16 likewise), fused AdamW (lr 3e-4). Random tokens.
# Prints one line: mode, median step time after 5 warm-up steps, tokens/s, and the first step's time.
import os, statistics, sys, time
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'peers'))
from torch_model import gpt2, V
mode, steps, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True

dev = 'cuda'
model = gpt2(B, T).to(dev)
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
