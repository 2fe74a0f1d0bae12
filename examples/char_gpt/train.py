"""Train a small character-level GPT on a text file, on the CPU (or a GPU if asked).

A plain training script in the style of the public ones: its settings are module globals,
overridden from the command line as --key=value (each value is read as a Python literal and
must have the type of the default it replaces), it prints

    step N: train loss X, val loss Y

at every evaluation (N optimizer updates done), an `iter N: loss X, time Tms` line every
log_interval updates, and saves a checkpoint in --out_dir; --init_from=resume continues from
that checkpoint.

    python train.py --data_path=input.txt --batch_size=32 --learning_rate=0.001
"""

import gzip
import math
import os
import sys
import time
from ast import literal_eval

import torch
from torch import nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------------------
# settings (override with --key=value)
out_dir = "out"
data_path = "input.txt"  # a text file, plain or .gz
eval_interval = 250
eval_iters = 20
log_interval = 10
always_save_checkpoint = True
init_from = "scratch"  # 'scratch' or 'resume' (from out_dir/ckpt.pt)
seed = 1337
# data
batch_size = 12
block_size = 64
# model
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
# AdamW
learning_rate = 1e-3
max_iters = 2000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
# learning-rate schedule: linear warmup, then cosine decay to min_lr
decay_lr = True
warmup_iters = 100
lr_decay_iters = 2000
min_lr = 1e-4
device = "cpu"
threads = 1  # torch's intra-op threads (0: torch's default)
# -----------------------------------------------------------------------------------------
config_keys = [
    k
    for k, v in globals().items()
    if not k.startswith("_") and isinstance(v, (int, float, bool, str))
]
for arg in sys.argv[1:]:
    assert arg.startswith("--") and "=" in arg, f"expected --key=value, got {arg!r}"
    key, val = arg[2:].split("=", 1)
    assert key in config_keys, f"unknown setting: {key}"
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val  # a string
    assert type(attempt) is type(globals()[key]), (
        f"--{key}={val}: expected {type(globals()[key]).__name__}, got {type(attempt).__name__}"
    )
    print(f"Overriding: {key} = {attempt}")
    globals()[key] = attempt
config = {k: globals()[k] for k in config_keys}
# -----------------------------------------------------------------------------------------

os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(seed)
if threads:
    torch.set_num_threads(threads)

opener = gzip.open if data_path.endswith(".gz") else open
with opener(data_path, "rt", encoding="utf-8") as f:
    text = f.read()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
splits = {"train": data[:n], "val": data[n:]}
print(f"{len(text):,} characters, {vocab_size} distinct")


def get_batch(split):
    d = splits[split]
    ix = torch.randint(len(d) - block_size, (batch_size,))
    x = torch.stack([d[i : i + block_size] for i in ix])
    y = torch.stack([d[i + 1 : i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        p = dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        return self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


model = GPT().to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
    lr=learning_rate,
    betas=(beta1, beta2),
)
print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")

iter_num = 0
best_val_loss = 1e9
ckpt_path = os.path.join(out_dir, "ckpt.pt")
if init_from == "resume" and os.path.exists(ckpt_path):
    print(f"Resuming training from {out_dir}")
    checkpoint = torch.load(ckpt_path, map_location=device)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    iter_num = checkpoint["iter_num"]
    best_val_loss = checkpoint["best_val_loss"]
    torch.set_rng_state(checkpoint["rng"])


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = model(*get_batch(split)).item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


t0 = time.time()
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for group in optimizer.param_groups:
        group["lr"] = lr
    if iter_num % eval_interval == 0 or iter_num == max_iters:
        losses = estimate_loss()
        print(
            f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}",
            flush=True,
        )
        if iter_num > 0 and (losses["val"] < best_val_loss or always_save_checkpoint):
            best_val_loss = min(best_val_loss, losses["val"])
            checkpoint = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "iter_num": iter_num,
                "best_val_loss": best_val_loss,
                "rng": torch.get_rng_state(),
                "config": config,
            }
            print(f"saving checkpoint to {out_dir}")
            torch.save(checkpoint, ckpt_path)
    if iter_num >= max_iters:
        break
    loss = model(*get_batch("train"))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip != 0.0:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    t1 = time.time()
    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {(t1 - t0) * 1000:.2f}ms")
    t0 = t1
    iter_num += 1
