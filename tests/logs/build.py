# ruff: noqa: UP031 (the frameworks' own %-format strings are kept as they are)
"""Builds the synthetic logs of the corpus from each framework's own format strings (the
source file and the string are named beside each builder; the numbers are made up, the
text around them is the framework's). Run it to regenerate: ``python tests/logs/build.py``.
The files under ``real/`` are real outputs of the frameworks (see README.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).parent / "built"
ESC = "\x1b"


def loss(step: int, base: float = 4.0) -> float:
    return round(base * math.exp(-step / 300) + 1.0, 4)


def megatron() -> str:
    # Megatron-LM megatron/training/training.py, training_log() and
    # evaluate_and_print_results(): ' iteration {:8d}/{:8d} |', ' consumed samples: {:12d} |',
    # ' elapsed time per iteration (ms): {:.1f} |', ' learning rate: {:.6E} |',
    # ' global batch size: {:5d} |', ' {}: {:.6E} |' (key 'lm loss'), ' loss scale: {:.1f} |',
    # ' grad norm: {:.3f} |', ' number of skipped iterations: {:3d} |'; and
    # ' validation loss at {} | ' + '{} value: {:.6E} | ' + '{} PPL: {:.6E} | '
    out = []
    for it in (100, 200, 300):
        s = f" [2024-05-01 10:00:{it // 100:02d}]"
        s += f" iteration {it:8d}/{1000:8d} |"
        s += f" consumed samples: {it * 32:12d} |"
        s += f" elapsed time per iteration (ms): {512.3:.1f} |"
        s += f" learning rate: {1e-4:.6E} |"
        s += f" global batch size: {32:5d} |"
        s += " {}: {:.6E} |".format("lm loss", loss(it))
        s += f" loss scale: {1.0:.1f} |"
        s += f" grad norm: {1.234:.3f} |"
        s += f" number of skipped iterations: {0:3d} |"
        out.append(s)
        if it % 200 == 0:
            v = loss(it, 4.2)
            string = " validation loss at {} | ".format(f"iteration {it} on validation set")
            string += "{} value: {:.6E} | ".format("lm loss", v)
            string += "{} PPL: {:.6E} | ".format("lm loss", math.exp(v))
            out += ["-" * (len(string) + 1), string, "-" * (len(string) + 1)]
    return "\n".join(out) + "\n"


def torchtitan() -> str:
    # torchtitan torchtitan/components/metrics.py, MetricsProcessor.log():
    # f"{color.red}step: {step:2}  {color.green}loss: {global_avg_loss:7.4f}  "
    # f"{color.orange}grad_norm: {grad_norm:7.4f}  {color.turquoise}memory: {..:5.2f}GiB"
    # f"({..:.2f}%)  {color.blue}tps: {round(tps):,}  {color.cyan}tflops: {tflops:,.2f}  "
    # f"{color.magenta}mfu: {mfu:.2f}%{color.reset}"; log_validation():
    # f"{color.yellow}validate step: {step:2}  {color.green}loss: {loss:7.4f}  ..."
    red, green, orange, turq, blue, cyan, mag, yellow, reset = (
        f"{ESC}[31m",
        f"{ESC}[32m",
        f"{ESC}[33m",
        f"{ESC}[36m",
        f"{ESC}[34m",
        f"{ESC}[96m",
        f"{ESC}[35m",
        f"{ESC}[93m",
        f"{ESC}[39m",
    )
    pre = "[rank0]:[titan] 2025-05-01 10:00:00,123 - root - INFO - "
    out = [pre + "Training starts at step 1"]
    for step in (1, 10, 20):
        out.append(
            pre + f"{red}step: {step:2}  {green}loss: {loss(step):7.4f}  "
            f"{orange}grad_norm: {1.5:7.4f}  {turq}memory: {12.34:5.2f}GiB({15.6:.2f}%)  "
            f"{blue}tps: {round(13352.4 + step):,}  {cyan}tflops: {1234.5:,.2f}  "
            f"{mag}mfu: {12.34:.2f}%{reset}"
        )
    out.append(
        pre + f"{yellow}validate step: {20:2}  {green}loss: {loss(20, 4.1):7.4f}  "
        f"{turq}memory: {12.34:5.2f}GiB({15.6:.2f}%)  {blue}tps: {round(25000.0):,}{reset}"
    )
    return "\n".join(out) + "\n"


def maxtext() -> str:
    # MaxText metric_logger.py: max_logging.log(f"completed step: {step}, seconds: {..:.3f}, "
    # f"TFLOP/s/device: {..:.3f}, Tokens/s/device: {..:.3f}, total_weights: {..}, "
    # f"loss: {..:.3f}"); eval: f"eval metrics after step: {step}, loss={..:.3f},"
    # f" total_weights={..}"
    pre = "I0501 10:00:00.000000 140 metric_logger.py:196] "
    out = []
    for step in range(0, 10):
        out.append(
            pre + f"completed step: {step}, seconds: {0.512:.3f}, TFLOP/s/device: {200.0:.3f}, "
            f"Tokens/s/device: {25000.0:.3f}, total_weights: {393216}, loss: {loss(step * 30):.3f}"
        )
        if step % 5 == 4:
            out.append("Completed eval step 0")
            out.append(
                pre + f"eval metrics after step: {step}, loss={loss(step * 30, 4.1):.3f},"
                f" total_weights={75264.0}"
            )
    return "\n".join(out) + "\n"


def nanogpt() -> str:
    # nanoGPT train.py: print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss
    # {losses['val']:.4f}") and print(f"iter {iter_num}: loss {lossf:.4f}, time {dt*1000:.2f}ms,
    # mfu {running_mfu*100:.2f}%")
    out = [
        "Overriding config with config/train_shakespeare_char.py:",
        "tokens per iteration will be: 16,384",
    ]
    for it in range(0, 30, 10):
        if it % 20 == 0:
            out.append(f"step {it}: train loss {loss(it, 3.2):.4f}, val loss {loss(it, 3.3):.4f}")
            if it:
                out.append("saving checkpoint to out-shakespeare-char")
        out.append(f"iter {it}: loss {loss(it, 3.1):.4f}, time {312.08:.2f}ms, mfu {-100.0:.2f}%")
    return "\n".join(out) + "\n"


def llmc() -> str:
    # llm.c train_gpt2.py: print0(f"val loss {val_loss}") at the top of an iteration, then
    # print0(f"step {step+1:4d}/{args.num_iterations} | train loss {lossf:.6f} | norm
    # {norm:.4f} | lr {lr:.2e} | ({(t1-t0)*1000:.2f} ms | {tokens_per_second:.0f} tok/s)")
    out = []
    for step in range(0, 6):
        if step % 3 == 0:
            out.append(f"val loss {loss(step * 10, 4.5)}")
        out.append(
            f"step {step + 1:4d}/{6} | train loss {loss(step * 10, 4.4):.6f} | norm {1.2345:.4f} | "
            f"lr {6e-4:.2e} | ({123.45:.2f} ms | {132000:.0f} tok/s)"
        )
    return "\n".join(out) + "\n"


def fairseq() -> str:
    # fairseq fairseq/logging/progress_bar.py, JsonProgressBar.log()/print():
    # logger.info(json.dumps(stats)) with stats {"epoch", "update", ...format_stat...}, tag
    # 'train_inner' / 'valid' / 'train' (print prefixes keys with the tag: valid_loss, ...)
    pre = "2024-05-01 10:00:00 | INFO | {} | "
    out = []
    for upd in (100, 200):
        stats = {
            "epoch": 1,
            "update": round(upd / 200, 3),
            "loss": f"{loss(upd, 9):.3f}",
            "ppl": f"{2 ** loss(upd, 9):.2f}",
            "wps": "12345.6",
            "ups": "2.1",
            "wpb": "4096",
            "bsz": "128",
            "num_updates": str(upd),
            "lr": "0.0005",
            "gnorm": "1.234",
            "train_wall": "30",
            "wall": "45",
        }
        out.append(pre.format("train_inner") + json.dumps(stats))
    valid = {
        "epoch": 1,
        "valid_loss": f"{loss(200, 8.8):.3f}",
        "valid_ppl": f"{2 ** loss(200, 8.8):.2f}",
        "valid_wps": "34567.8",
        "valid_wpb": "4096",
        "valid_bsz": "128",
        "valid_num_updates": "200",
    }
    out.append(pre.format("valid") + json.dumps(valid))
    train = {
        "epoch": 1,
        "train_loss": f"{loss(150, 9):.3f}",
        "train_ppl": "100.5",
        "train_num_updates": "200",
        "train_lr": "0.0005",
    }
    out.append(pre.format("train") + json.dumps(train))
    return "\n".join(out) + "\n"


def keras_fit(evaluate: bool = False) -> str:
    # Keras 3 keras/src/callbacks/progbar_logger.py: io_utils.print_msg(f"Epoch {epoch + 1}/
    # {self.epochs}"); keras/src/utils/progbar.py update(): bar = ("%" + str(numdigits) +
    # "d/%d") % (current, target) + " " + "━" * ..., info " \x1b[1m{eta}\x1b[0m" /
    # self._format_time(...), then for each value f" - {k}:" + f" {avg:.4f}"; redrawn with
    # "\r" while dynamic, "\n" when finalized
    out = ""
    for epoch in (1, 2):
        out += f"Epoch {epoch}/2\n"
        for current in (1, 50):
            out += (
                f"\r{current:3d}/100 "
                + "━" * 4
                + f" \x1b[1m{3}s\x1b[0m 10ms/step - loss: {loss(current):.4f}"
            )
        end = epoch * 100
        out += (
            "\r100/100 " + "━" * 20 + f" \x1b[1m{1}s\x1b[0m 10ms/step - loss: {loss(end):.4f} "
            f"- val_loss: {loss(end, 4.2):.4f}\n"
        )
    if evaluate:
        out += " 10/10 " + "━" * 20 + f" \x1b[1m{0}s\x1b[0m 5ms/step - loss: {loss(200, 4.2):.4f}\n"
    return out


def keras_csv() -> str:
    # Keras keras/src/callbacks/csv_logger.py: header ["epoch"] + keys, one row per epoch
    # (epoch counted from 0)
    rows = ["epoch,loss,val_loss"] + [
        f"{e},{loss((e + 1) * 100)},{loss((e + 1) * 100, 4.2)}" for e in range(3)
    ]
    return "\n".join(rows) + "\n"


def timm_train() -> str:
    # timm train.py: _logger.info(f'Train: {epoch} [{update_idx:>4d}/{updates_per_epoch} '
    # f'({100. * (update_idx + 1) / updates_per_epoch:>3.0f}%)]  Loss: {loss_now:#.3g}
    # ({loss_avg:#.3g})  Time: {..:.3f}s, {..:>7.2f}/s  ({..:.3f}s, {..:>7.2f}/s)  LR: {lr:.3e}
    # Data: {..:.3f} ({..:.3f})')
    out = []
    for epoch in (0, 1):
        for idx in (0, 50, 99):
            out.append(
                f"Train: {epoch} [{idx:>4d}/{100} ({100.0 * (idx + 1) / 100:>3.0f}%)]  "
                f"Loss: {loss(epoch * 100 + idx):#.3g} ({loss(epoch * 100):#.3g})  "
                f"Time: {0.123:.3f}s, {1040.5:>7.2f}/s  ({0.125:.3f}s, {1024.0:>7.2f}/s)  "
                f"LR: {1e-3:.3e}  Data: {0.012:.3f} ({0.015:.3f})"
            )
    return "\n".join(out) + "\n"


def timm_summary() -> str:
    # timm timm/utils/summary.py update_summary(): rowd = OrderedDict(epoch=epoch) +
    # train_ + eval_ metrics + lr; csv.DictWriter with a header on the first write
    rows = ["epoch,train_loss,eval_loss,eval_top1,eval_top5,lr"]
    rows += [
        f"{e},{loss((e + 1) * 100)},{loss((e + 1) * 100, 4.2)},{50.0 + e},{80.0 + e},0.001"
        for e in range(3)
    ]
    return "\n".join(rows) + "\n"


def deepspeed() -> str:
    # DeepSpeed deepspeed/runtime/engine.py _report_progress(): log_dist(f"step={step},
    # skipped={self.skipped_steps}, lr={lr}, mom={mom}", ranks=[0])
    pre = "[2024-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] "
    return "".join(
        pre + f"step={s}, skipped={0}, lr={[1e-4]}, mom={[(0.9, 0.999)]}\n" for s in (10, 20, 30)
    )


def olmo() -> str:
    # OLMo olmo/train.py: self.log_metrics_to_console(f"[step={self.global_step}/
    # {self.max_steps}]", metrics) → log.info(f"{prefix}\n" + "\n".join(f"    {name}=
    # {format_float(value)}")) with format_float: > 1000 → f"{int(value):,d}", > 10 → .2f, > 1 → .3f
    out = []
    for step in (10, 20):
        out.append(f"2024-05-01 10:00:00.000\tnode0:0\tolmo.train:1000\tINFO\t[step={step}/{1000}]")
        out.append(f"    train/CrossEntropyLoss={loss(step * 10):.3f}")
        out.append(f"    train/Perplexity={math.exp(loss(step * 10)):.2f}")
        out.append(f"    throughput/device/tokens_per_second={int(12345.6 + step):,d}")
        if step == 20:
            out.append(
                f"    eval/v3-small-c4_en-validation/CrossEntropyLoss={loss(step * 10, 4.2):.3f}"
            )
    return "\n".join(out) + "\n"


def tf_estimator() -> str:
    # TensorFlow Estimator: basic_session_run_hooks.LoggingTensorHook '%s = %s' joined ', '
    # ("loss = 2.3, step = 100"), StepCounterHook 'global_step/sec: %g', and estimator.py
    # _write_dict_to_summary: logging.info('Saving dict for global step %d: %s', step,
    # _dict_to_str(dictionary)) with ', '.join('%s = %s' % (k, v) sorted)
    out = []
    for step in (100, 200):
        out.append(f"INFO:tensorflow:loss = {loss(step)}, step = {step} (1.234 sec)")
        out.append("INFO:tensorflow:global_step/sec: 81.0374")
    out.append(
        f"INFO:tensorflow:Saving dict for global step 200: accuracy = 0.75, global_step = 200, loss = {loss(200, 4.2)}"
    )
    return "\n".join(out) + "\n"


def opennmt() -> str:
    # OpenNMT-py onmt/utils/statistics.py output(): logger.info(("Step %s; acc: %6.2f; ppl:
    # %5.2f; xent: %4.2f; " + "lr: %7.5f; %3.0f/%3.0f tok/s; %6.0f sec") % (step_fmt, ...));
    # step_fmt = "%s/%5d" % ("%2d" % step, num_steps); trainer: logger.info('Validation
    # perplexity: %g' % valid_stats.ppl()) and 'Validation accuracy: %g'
    pre = "[2024-05-01 10:00:00,000 INFO] "
    out = []
    for step in (50, 100):
        step_fmt = "%s/%5d" % ("%2d" % step, 200)
        x = loss(step)
        out.append(
            pre
            + (
                "Step %s; acc: %6.2f; ppl: %5.2f; xent: %4.2f; "
                + "lr: %7.5f; %3.0f/%3.0f tok/s; %6.0f sec"
            )
            % (step_fmt, 45.6, math.exp(x), x, 0.0007, 1234, 2345, 12)
        )
    out.append(pre + "Validation perplexity: %g" % math.exp(loss(100, 4.2)))
    out.append(pre + "Validation accuracy: %g" % 47.5)
    return "\n".join(out) + "\n"


def clu() -> str:
    # CLU clu/metric_writers/logging_writer.py write_scalars(): logging.info("[%d] %s", step,
    # ", ".join(f"{k}={v:.6f}" ...))
    pre = "I0501 10:00:00.000000 140 logging_writer.py:48] "
    return "".join(
        pre + f"[{s}] learning_rate={1e-3:.6f}, train_loss={loss(s):.6f}\n" for s in (100, 200)
    )


def torchtune() -> str:
    # torchtune recipes/full_finetune_single_device.py: pbar.set_description(f"{curr_epoch +
    # 1}|{self.global_step}|Loss: {loss_to_log}") (tqdm: redrawn with \r on stderr)
    out = ""
    for step in (1, 2, 3):
        out += f"\r{1}|{step}|Loss: {loss(step * 10)}:  {step * 33}%|███       | {step}/3 [00:0{step}<00:02,  1.23it/s]"
    return out + "\n"


def mlx_lm() -> str:
    # mlx-lm mlx_lm/tuner/trainer.py: print(f"Iter {it}: Train loss {train_loss:.3f}, "
    # f"Learning Rate {learning_rate:.3e}, It/sec {it_sec:.3f}, Tokens/sec {tokens_sec:.3f},
    # Trained Tokens {trained_tokens}, Peak mem {peak_mem:.3f} GB") and
    # f"Iter {it}: Val loss {val_loss:.3f}, Val took {val_time:.3f}s"
    out = [f"Iter 1: Val loss {loss(0, 4.2):.3f}, Val took {1.234:.3f}s"]
    for it in (10, 20):
        out.append(
            f"Iter {it}: Train loss {loss(it):.3f}, Learning Rate {1e-5:.3e}, It/sec {1.234:.3f}, "
            f"Tokens/sec {567.8:.3f}, Trained Tokens {it * 512}, Peak mem {1.234:.3f} GB"
        )
    return "\n".join(out) + "\n"


def litgpt() -> str:
    # LitGPT litgpt/finetune/full.py fit(): fabric.print(f"iter {iter_num} | step
    # {step_count}: loss {loss_item:.4f}, iter time: {(t1 - iter_t0) * 1000:.2f} ms"
    # f"{' (optimizer.step)' if not is_accumulating else ''}") and
    # fabric.print(f"iter {iter_num}: val loss {val_loss.item():.4f}, val time: {t1 * 1000:.2f} ms")
    out = []
    for it in (4, 8):
        out.append(
            f"iter {it} | step {it // 4}: loss {loss(it):.4f}, iter time: {123.45:.2f} ms (optimizer.step)"
        )
    out.append(f"iter 8: val loss {loss(8, 4.2):.4f}, val time: {456.78:.2f} ms")
    return "\n".join(out) + "\n"


def ultralytics() -> str:
    # Ultralytics ultralytics/engine/trainer.py save_metrics(): header ("%s," * n % tuple(
    # ["epoch", "time", *keys])).rstrip(","), rows ("%.6g," * n % tuple([self.epoch + 1, t,
    # *vals])).rstrip(",") — one row per epoch, epoch counted from 1
    keys = [
        "train/box_loss",
        "train/cls_loss",
        "metrics/mAP50(B)",
        "val/box_loss",
        "val/cls_loss",
        "lr/pg0",
    ]
    n = len(keys) + 2
    out = ("%s," * n % tuple(["epoch", "time", *keys])).rstrip(",") + "\n"
    for epoch in range(3):
        vals = [loss(epoch * 100), loss(epoch * 100, 2), 0.5, loss(epoch * 100, 4.2), 1.1, 0.00123]
        out += ("%.6g," * n % tuple([epoch + 1, 12.5 * (epoch + 1), *vals])).rstrip(",") + "\n"
    return out


def torch_summary_writer(folder: Path) -> None:
    # PyTorch torch/utils/tensorboard/writer.py SummaryWriter.add_scalar(tag, value, step)
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in (10, 20, 30):
        writer.add_scalar("Loss/train", loss(step), step)
        if step % 20 == 0:
            writer.add_scalar("Loss/val", loss(step, 4.2), step)
    writer.close()
    for f in folder.glob("events.out.tfevents.*"):  # a stable name
        f.rename(folder / "events.out.tfevents.0.corpus")


BUILDERS = {
    "megatron.log": megatron,
    "torchtitan.log": torchtitan,
    "maxtext.log": maxtext,
    "nanogpt.log": nanogpt,
    "llmc.log": llmc,
    "fairseq.log": fairseq,
    "keras_fit.log": keras_fit,
    "keras_fit_evaluate.log": lambda: keras_fit(evaluate=True),
    "keras_csvlogger.csv": keras_csv,
    "timm_train.log": timm_train,
    "timm_summary.csv": timm_summary,
    "deepspeed.log": deepspeed,
    "olmo.log": olmo,
    "tf_estimator.log": tf_estimator,
    "opennmt.log": opennmt,
    "clu.log": clu,
    "torchtune.log": torchtune,
    "mlx_lm.log": mlx_lm,
    "litgpt.log": litgpt,
    "ultralytics_results.csv": ultralytics,
}


if __name__ == "__main__":
    HERE.mkdir(exist_ok=True)
    for name, build in BUILDERS.items():
        (HERE / name).write_bytes(build().encode())
    torch_summary_writer(HERE / "pytorch_tb")
