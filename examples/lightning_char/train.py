"""Train a tiny character-level transformer with PyTorch Lightning, on the CPU.

A plain Lightning script: argparse flags (`--batch_size --learning_rate --max_steps
--output_dir --val_check_interval …`), a `LightningModule` built from `torch.nn`, trained from
scratch on character ids of a text file; Lightning's `CSVLogger` writes the losses to
`<output_dir>/csv/version_0/metrics.csv` (a `step` column), a `ModelCheckpoint` keeps `last.ckpt` in
`<output_dir>/checkpoints/`, and `--ckpt_path=last` (`trainer.fit(..., ckpt_path="last")`)
resumes from it; `--target_loss` ends training early
(Lightning's `EarlyStopping(stopping_threshold=…)`).

    python train.py --data_path=input.txt.gz --output_dir=out --max_steps=200 \\
        --batch_size=16 --learning_rate=1e-3
"""

import argparse
import gzip
import math
import os

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.nn import functional as F


class CharTransformer(L.LightningModule):
    """A causal transformer over character ids; `val_loss` is the mean next-character loss."""

    def __init__(
        self,
        vocab: int,
        block_size: int,
        n_embd: int,
        n_layer: int,
        n_head: int,
        learning_rate: float,
        warmup_steps: int,
        max_steps: int,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.tok = nn.Embedding(vocab, n_embd)
        self.pos = nn.Embedding(block_size, n_embd)
        layer = nn.TransformerEncoderLayer(
            n_embd, n_head, 4 * n_embd, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = nn.Linear(n_embd, vocab)
        mask = torch.triu(torch.full((block_size, block_size), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        h = self.blocks(h, mask=self.mask[:t, :t], is_causal=True)
        return self.head(h)

    def _loss(self, batch: torch.Tensor) -> torch.Tensor:
        logits = self(batch[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), prog_bar=True)

    def configure_optimizers(self):
        hp = self.hparams
        opt = torch.optim.AdamW(self.parameters(), lr=hp.learning_rate, weight_decay=0.1)

        def factor(step: int) -> float:  # linear warmup, then cosine decay to a tenth
            if step < hp.warmup_steps:
                return (step + 1) / hp.warmup_steps
            progress = min(1.0, (step - hp.warmup_steps) / max(1, hp.max_steps - hp.warmup_steps))
            return 0.1 + 0.45 * (1 + math.cos(math.pi * progress))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def windows(ids: torch.Tensor, block_size: int, count: int, seed: int) -> torch.Tensor:
    """`count` sequences of `block_size + 1` ids at random places of `ids`."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - block_size - 1, (count,), generator=g)
    return torch.stack([ids[s : s + block_size + 1] for s in starts.tolist()])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_path", default="input.txt", help="a text file, plain or .gz")
    p.add_argument("--output_dir", default="out")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--max_steps", type=int, default=1000)
    p.add_argument("--warmup_steps", type=int, default=10)
    p.add_argument("--val_check_interval", type=int, default=50)
    p.add_argument("--limit_val_batches", type=int, default=4)
    p.add_argument("--log_every_n_steps", type=int, default=10)
    p.add_argument("--checkpoint_every", type=int, default=10)
    p.add_argument("--block_size", type=int, default=64)
    p.add_argument("--n_layer", type=int, default=2)
    p.add_argument("--n_head", type=int, default=2)
    p.add_argument("--n_embd", type=int, default=64)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    p.add_argument("--ckpt_path", default=None, help="resume from: last (the newest) or a file")
    p.add_argument(
        "--target_loss",
        type=float,
        default=None,
        help="end training at the first val_loss at or below this",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    L.seed_everything(args.seed)

    opener = gzip.open if args.data_path.endswith(".gz") else open
    with opener(args.data_path, "rt", encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    n_train = int(0.9 * len(ids))
    # enough training sequences for max_steps batches: one epoch is the whole run
    train = windows(ids[:n_train], args.block_size, args.max_steps * args.batch_size, args.seed)
    val = windows(ids[n_train:], args.block_size, args.limit_val_batches * 16, seed=0)
    train_loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, shuffle=True)
    val_loader = torch.utils.data.DataLoader(val, batch_size=16)

    model = CharTransformer(
        len(chars),
        args.block_size,
        args.n_embd,
        args.n_layer,
        args.n_head,
        args.learning_rate,
        args.warmup_steps,
        args.max_steps,
    )
    checkpoints = ModelCheckpoint(
        dirpath=os.path.join(args.output_dir, "checkpoints"),
        save_last=True,
        save_top_k=0,
        every_n_train_steps=args.checkpoint_every,
    )
    callbacks = [checkpoints]
    if args.target_loss is not None:
        callbacks.append(
            EarlyStopping(
                monitor="val_loss",
                stopping_threshold=args.target_loss,
                patience=10**9,
                check_on_train_epoch_end=False,
                verbose=True,
            )
        )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.max_steps,
        val_check_interval=args.val_check_interval,
        check_val_every_n_epoch=None,
        limit_val_batches=args.limit_val_batches,
        log_every_n_steps=args.log_every_n_steps,
        logger=CSVLogger(
            args.output_dir, name="csv", version=0, flush_logs_every_n_steps=args.log_every_n_steps
        ),
        callbacks=callbacks,
        default_root_dir=args.output_dir,
        enable_model_summary=False,
    )
    trainer.fit(model, train_loader, val_loader, ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
