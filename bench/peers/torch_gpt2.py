# PyTorch GPT-2 124M training step, B=4 T=64, fp32, AdamW (lr 3e-4, betas .9/.999, eps 1e-8, wd 0), 2 threads.
#   python torch_gpt2.py eager|compile|eager-bf16|compile-bf16 STEPS
# -bf16: the forward under torch.autocast('cpu', bfloat16) (bf16 products, f32 master weights and optimizer),
# the counterpart of tgc train --dtype bf16.
# Same model as tgc's examples/gpt.tg: learned positions, pre-LN (eps 1e-5), fused qkv with bias, causal
# attention scaled by 1/sqrt(64) (F.scaled_dot_product_attention, is_causal), GELU tanh, tied LM head, mean CE.
# Data: consecutive B*(T+1) windows of tokens.u16. Prints one JSON line per step (step_s) and a summary.
import contextlib, json, os, sys, time
t_start = time.perf_counter()
import numpy as np, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_model import gpt2
mode, steps = sys.argv[1], int(sys.argv[2])
bf16 = mode.endswith('-bf16')
torch.set_num_threads(2); torch.manual_seed(0)
B, T = 4, 64

model = gpt2(B, T)
nparams = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
tok = np.fromfile(os.environ.get('TOKENS') or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'tokens.u16'), dtype='<u2').astype(np.int64)
def batch(i):
    w = torch.from_numpy(tok[i * B * (T + 1):(i + 1) * B * (T + 1)].reshape(B, T + 1))
    return w[:, :T].contiguous(), w[:, 1:].contiguous()

if mode.startswith('compile'):
    fwd = torch.compile(model)
    @torch.compile(fullgraph=False)
    def opt_step(): opt.step()
else:
    fwd, opt_step = model, opt.step

def step(i):
    x, y = batch(i)
    with torch.autocast('cpu', dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        loss = fwd(x, y)
    opt.zero_grad(set_to_none=True)   # grads of the previous step are dropped before backward fills them
    loss.backward()
    opt_step()
    return loss.item()

t_ready = time.perf_counter()
print(json.dumps({'system': f'torch-{mode}', 'torch': torch.__version__, 'threads': torch.get_num_threads(),
                  'params': nparams, 'setup_s': t_ready - t_start}), flush=True)
for i in range(steps):
    t0 = time.perf_counter(); loss = step(i); dt = time.perf_counter() - t0
    print(json.dumps({'step': i + 1, 'loss': loss, 'step_s': dt}), flush=True)
