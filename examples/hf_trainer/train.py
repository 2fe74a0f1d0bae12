"""Train a tiny character-level GPT-2 with Hugging Face Transformers' `Trainer`, on the CPU.

A plain Transformers script: its flags are `TrainingArguments` (`--per_device_train_batch_size
--learning_rate --max_steps --output_dir --eval_steps …`) and a few of its own (the text file
and the model's size), parsed by `HfArgumentParser`; the model is built from a `GPT2Config`
and trained from scratch on character ids (no tokenizer, nothing downloaded); the `Trainer`
evaluates every `--eval_steps`, saves checkpoints in `--output_dir`, stops early at
`--target_loss` (a `TrainerCallback`), and `--resume_from_checkpoint=latest` resumes from the
newest checkpoint in `--output_dir`.

    python train.py --data_path=input.txt.gz --output_dir=out --max_steps=200 \\
        --per_device_train_batch_size=16 --learning_rate=1e-3
"""

import gzip
import json
import os
import shutil
from dataclasses import dataclass, field

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the model is built here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer_utils import get_last_checkpoint


@dataclass
class ModelArguments:
    """The model's size and the text it learns."""

    data_path: str = field(default="input.txt", metadata={"help": "a text file, plain or .gz"})
    block_size: int = field(default=64, metadata={"help": "characters per sequence"})
    n_layer: int = field(default=2)
    n_head: int = field(default=2)
    n_embd: int = field(default=64)
    eval_sequences: int = field(default=64, metadata={"help": "validation sequences"})
    threads: int = field(default=1, metadata={"help": "torch's intra-op threads"})
    target_loss: float | None = field(
        default=None, metadata={"help": "end training at the first eval_loss at or below this"}
    )


class StopAtLoss(TrainerCallback):
    """End training at the first evaluation whose loss is at or below ``target``."""

    def __init__(self, target: float) -> None:
        self.target = target

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if metrics and metrics.get("eval_loss", float("inf")) <= self.target:
            print(f"eval_loss {metrics['eval_loss']:.4f} <= {self.target}: stopping")
            control.should_training_stop = True


class Windows(torch.utils.data.Dataset):
    """Sequences of `block_size` character ids: every `stride`-th window of `ids`."""

    def __init__(self, ids: torch.Tensor, block_size: int, stride: int) -> None:
        self.ids, self.block_size = ids, block_size
        self.starts = range(0, len(ids) - block_size, stride)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        x = self.ids[self.starts[i] : self.starts[i] + self.block_size]
        return {"input_ids": x, "labels": x}


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest ``checkpoint-N`` of ``output_dir`` that was written whole. The Trainer
    writes a checkpoint's files in place, its ``trainer_state.json`` last: a run killed
    while saving leaves a checkpoint that ``get_last_checkpoint`` would pick and that cannot
    be loaded, so the newest one whose state reads is taken."""
    while os.path.isdir(output_dir) and (last := get_last_checkpoint(output_dir)) is not None:
        try:
            with open(os.path.join(last, "trainer_state.json")) as f:
                json.load(f)
            return last
        except (OSError, ValueError):
            print(f"{last} was not written whole: set aside as {last}.incomplete")
            shutil.rmtree(f"{last}.incomplete", ignore_errors=True)
            os.replace(last, f"{last}.incomplete")
    return None


def main() -> None:
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    torch.set_num_threads(model_args.threads)

    opener = gzip.open if model_args.data_path.endswith(".gz") else open
    with opener(model_args.data_path, "rt", encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    n_train = int(0.9 * len(ids))
    block = model_args.block_size
    train = Windows(ids[:n_train], block, stride=block // 2)
    val_ids = ids[n_train:]
    val_stride = max(1, (len(val_ids) - block) // model_args.eval_sequences)
    val = Windows(val_ids, block, stride=val_stride)
    val.starts = val.starts[: model_args.eval_sequences]

    config = GPT2Config(
        vocab_size=len(chars),
        n_positions=block,
        n_embd=model_args.n_embd,
        n_layer=model_args.n_layer,
        n_head=model_args.n_head,
        bos_token_id=0,
        eos_token_id=0,
    )
    torch.manual_seed(training_args.seed)
    model = GPT2LMHeadModel(config)
    print(f"model: {sum(p.numel() for p in model.parameters())} parameters, {len(chars)} chars")

    callbacks = [] if model_args.target_loss is None else [StopAtLoss(model_args.target_loss)]
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=val,
        callbacks=callbacks,
    )
    # --resume_from_checkpoint=PATH resumes from that checkpoint; "latest" (as in the
    # diffusers scripts) from the newest one in output_dir, if there is one.
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint == "latest":
        checkpoint = last_complete_checkpoint(training_args.output_dir)
    if checkpoint is not None:
        print(f"resuming from {checkpoint}")
    trainer.train(resume_from_checkpoint=checkpoint)
    trainer.save_state()


if __name__ == "__main__":
    main()
