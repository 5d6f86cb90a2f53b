"""The checks of bench/gpu_smoke.sh that are Python (issue 42 "A prepared device check").

    python bench/gpu_checks.py params OUT.yaml          # 01's smoke params on the tiny model, bf16 + LoRA + checkpointing
    python bench/gpu_checks.py judge [--device cuda]     # a transformers judge answering on the GPU
    python bench/gpu_checks.py master-weights [--device cuda]   # 1e-6 AdamW steps: bf16 storage vs fp32 masters
    python bench/gpu_checks.py plan-vs-peak [--dry-run]  # factlab plan's estimate vs torch.cuda.max_memory_allocated

Each prints one ``result:`` line (JSON) last and exits 1 when its check fails. ``--dry-run`` (and
``--device cpu``) run the same code at CPU sizes: what the CPU suite runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _result(ok: bool, **fields) -> int:
    print("result: " + json.dumps({"ok": ok, **fields}, default=str))
    return 0 if ok else 1


def cmd_params(args) -> int:
    """01_corver's smoke params, every model the tiny one, one GRPO step of one run, in bf16 with
    LoRA and gradient checkpointing, no vLLM, no warm start."""
    from factlab import models, runner

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    draft = out.with_name(out.stem + ".draft.yaml")
    draft.write_text(f"""base: {ROOT / 'params' / '01_corver_smoke.yaml'}
model: {{dtype: bfloat16}}
warm_start: {{enabled: false}}
runs: [full]
grpo: {{max_steps: 1, bf16: true, gradient_checkpointing: true, use_vllm: false, save_steps: 1, report_to: none}}
lora: {{r: 8, alpha: 16}}
""", encoding="utf-8")
    runner.retarget_models("01_corver", draft, out, models.TINY_MODEL)
    return _result(True, params=str(out))


def cmd_judge(args) -> int:
    from factlab.judges import make_judge
    from factlab.models import TINY_MODEL
    from factlab.sections import JudgeSection

    dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    judge = make_judge(JudgeSection(backend="transformers", model=TINY_MODEL, device=args.device, dtype=dtype,
                                    max_new_tokens=8, cache=False))
    t0 = time.perf_counter()
    replies = judge.judge(["Is Paris the capital of France? Answer YES or NO."] * 4)
    used = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else 0
    ok = len(replies) == 4 and all(isinstance(r, str) for r in replies) and (used > 0 or args.device == "cpu")
    return _result(ok, device=args.device, replies=replies[:1], seconds=round(time.perf_counter() - t0, 2),
                   cuda_bytes=used)


def cmd_master_weights(args) -> int:
    from factlab.train.precision import weights_moved

    bf16 = weights_moved(torch.bfloat16, args.lr, device=args.device)
    fp32 = weights_moved(torch.float32, args.lr, device=args.device)
    return _result(bf16 == 0 and fp32 == 1000, device=args.device, lr=args.lr, moved_bf16=bf16, moved_fp32=fp32)


def _grpo_loss(model, ids, completion: int):
    """TRL's per-token log-probabilities of the last ``completion`` tokens (logits_to_keep),
    temperature 1, summed into a loss."""
    logits = model(input_ids=ids, logits_to_keep=completion + 1).logits[:, :-1]
    logits = logits / 1.0  # TRL divides by the temperature: a second tensor of the logits' size
    target = ids[:, -completion:]
    if logits.dtype == torch.float32:
        logp = torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    else:  # TRL's selective_log_softmax for bf16: one row at a time, only the gathered values kept
        logp = torch.stack([torch.log_softmax(row.float(), -1).gather(-1, t.unsqueeze(-1)).squeeze(-1)
                            for row, t in zip(logits, target)])
    return -logp.mean()


def cmd_plan_vs_peak(args) -> int:
    """An 8B-shaped model with random weights (the params' policy shape, bf16, LoRA and
    checkpointing as the params say) trains two steps at the planned micro-batch; the peak of
    torch's allocator against the planner's trainer terms (weights, gradients, optimizer states,
    activations, logits: what the trainer itself allocates; vLLM, judges and the CUDA context are
    not in this process)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from factlab.plan import STRATEGIES, activation_terms, model_shape, policy_state_terms
    from factlab.runner import load_params

    cfg = load_params(Path(args.params).stem, args.params)
    grpo, lora = cfg.grpo, cfg.lora
    name = cfg.model.name
    if args.dry_run:  # CPU sizes: the tiny model's shape, a small micro-batch
        from factlab.models import TINY_MODEL, resolve_model

        name, micro, prompt, completion, device = resolve_model(TINY_MODEL), 2, 16, 16, "cpu"
    else:
        micro, prompt, completion, device = (grpo.per_device_train_batch_size, grpo.max_prompt_length,
                                             grpo.max_completion_length, "cuda")
    shape = model_shape(name)
    optim = "adamw_torch"  # bitsandbytes may be absent on the device; the plan below uses the same optimizer
    terms, _, trainable = policy_state_terms(shape, lora, optim, STRATEGIES["single"], 1,
                                             2 if lora is not None else 4)
    terms += activation_terms(shape, micro, prompt + completion, completion, grpo.gradient_checkpointing)
    planned = sum(t.bytes for t in terms)
    from factlab.plan import _shipped

    config = AutoConfig.for_model(**{k: v for k, v in (_shipped(name) or json.loads(
        (Path(name) / "config.json").read_text())).items() if k not in ("architectures", "torch_dtype")})
    dtype = torch.bfloat16 if lora is not None else torch.float32
    t0 = time.perf_counter()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    if lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, target_modules=lora.target_modules,
                                                 lora_dropout=0.0, task_type="CAUSAL_LM"))
    if grpo.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ids = torch.randint(0, shape.vocab, (micro, prompt + completion), device=device)
    for _ in range(2):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = _grpo_loss(model, ids, completion)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    fields = dict(model=name, params=shape.params, trainable=trainable, micro_batch=micro, tokens=prompt + completion,
                  planned_gb=round(planned / 1e9, 2), terms={t.name: round(t.bytes / 1e9, 2) for t in terms},
                  measured_peak_gb=None if peak is None else round(peak / 1e9, 2),
                  seconds=round(time.perf_counter() - t0, 1))
    if peak is None:
        return _result(bool(torch.isfinite(loss)), **fields)
    # the plan is an upper bound that should not be loose by more than 2x
    return _result(peak <= planned * 1.05 and peak >= planned / 2, ratio=round(peak / planned, 3), **fields)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/gpu_checks.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pa = sub.add_parser("params")
    pa.add_argument("out")
    pa.set_defaults(func=cmd_params)
    j = sub.add_parser("judge")
    j.add_argument("--device", default="cuda")
    j.set_defaults(func=cmd_judge)
    m = sub.add_parser("master-weights")
    m.add_argument("--device", default="cuda")
    m.add_argument("--lr", type=float, default=1e-6)
    m.set_defaults(func=cmd_master_weights)
    pv = sub.add_parser("plan-vs-peak")
    pv.add_argument("--params", default=str(ROOT / "params" / "01_corver.yaml"))
    pv.add_argument("--dry-run", action="store_true")
    pv.set_defaults(func=cmd_plan_vs_peak)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
