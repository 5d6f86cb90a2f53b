"""TRL's fused LM head against factlab's compact head (``train.sft.CompactHeadSFTTrainer``) on
CPU: seconds per SFT step of the organism on SEVA verifier examples (Appendix K's system prompt and
user turn, a JSON verdict), the shape of 03_seva's SFT. Prints each trainer's median step time over
its runs (ABAB, after one warm-up step each) and their ratio. The two losses are equal (tests/train/test_sft.py).

    python bench/bench_sft_head.py [--steps 12] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import SFTTrainer

from factlab import organism
from factlab.models import load_model
from factlab.rewards import seva_output
from factlab.sections import SFTSection
from factlab.train.sft import CompactHeadSFTTrainer, sft_args

VERDICT = {"evidence_alignment": [{"claim_span": "Paris", "source_span": "capital is Paris", "status": "match"}],
           "reasoning_chain": [{"claim_part": "capital", "source_evidence": "capital is Paris",
                                "judgment": "supported", "explanation": "Stated in the source."}],
           "label": "Attributable", "confidence": 0.9, "error_type": None, "fix_suggestion": None}


class StepTimes(TrainerCallback):
    def __init__(self):
        self.times, self._t = [], None

    def on_step_begin(self, args, state, control, **kw):
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter() - self._t)


def run(cls, model_name: str, rows: list[dict], steps: int) -> list[float]:
    model, tok = load_model(model_name, device="cpu")
    with tempfile.TemporaryDirectory() as out:
        args = sft_args(SFTSection(max_steps=steps + 1, per_device_train_batch_size=8, max_length=1024, bf16=False,
                                   gradient_checkpointing=False, report_to="none", save_steps=10_000), out)
        timer = StepTimes()
        cls(model=model, processing_class=tok, args=args, train_dataset=Dataset.from_list(rows),
            callbacks=[timer]).train()
    return timer.times[1:]  # the first step pays for the warm-up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="organism")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if organism.is_organism(a.model):
        organism.build(a.model)
    facts = [(c.name, v) for c in organism.world() if (v := organism.value(c, "capital"))][:64]
    rows = [{"prompt": seva_output.verifier_messages(f"The capital of {name} is {v}.", f"{name} is a country. Its capital is {v}."),
             "completion": [{"role": "assistant", "content": json.dumps(VERDICT)}]} for name, v in facts]
    times = {"TRL fused head": [], "compact head": []}
    for _ in range(2):
        for name, cls in (("TRL fused head", SFTTrainer), ("compact head", CompactHeadSFTTrainer)):
            times[name] += run(cls, a.model, rows, a.steps)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k}: median {med[k]:.3f} s a step (min {min(v):.3f}, max {max(v):.3f}, {len(v)} steps), "
              f"{a.threads} threads, {a.model}, batch 8")
    print(f"ratio compact / TRL: {med['compact head'] / med['TRL fused head']:.2f}")


if __name__ == "__main__":
    main()
