"""The trainer's cross-process path on two real CPU processes (torch.distributed, gloo, through
accelerate): token advantages and the logged advantage diagnostics equal the single-process
result on the same batch, though each process's completions have a different width."""

import json
import socket
import subprocess
import sys
import textwrap
from collections import defaultdict
from types import SimpleNamespace

import torch

from factlab.rewards import TokenShaping
from factlab.train.stepwise_grpo import TokenLevelAdvantages
from factlab.train.trainer import FactlabGRPOTrainer, ScoredBatch

G = 8  # one group, split over the two processes
LENGTHS = [[3, 5, 2, 4], [7, 1, 6, 7]]  # completion lengths on process 0 and 1: widths 5 and 7
REWARDS = [3.0, -2.0, 3.0, 3.0, -2.0, 3.0, 3.0, 3.0]


def shaping(texts, ids, rows):
    """-0.3 on every second token of a completion: a stand-in for CorVer's sentence rewards."""
    return [TokenShaping([-0.3 if t % 2 else 0.0 for t in range(len(x))], {"n": float(len(x))}) for x in ids]


def scored(rank: int, width: int, accelerator) -> tuple[SimpleNamespace, ScoredBatch]:
    lengths = LENGTHS[rank]
    ids = [list(range(1, n + 1)) for n in lengths]
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    trainer = SimpleNamespace(accelerator=accelerator, reward_weights=torch.tensor([1.0]), scale_rewards="group",
                              _metrics=defaultdict(lambda: defaultdict(list)))
    trainer.gathered_mean = lambda total, count: FactlabGRPOTrainer.gathered_mean(trainer, total, count)
    batch = ScoredBatch(mode="train", rows=[{}] * len(ids), completions=["x"] * len(ids), completion_ids=ids,
                        rewards_per_func=torch.tensor(REWARDS).unsqueeze(1),
                        output={"completion_ids": torch.zeros_like(mask), "completion_mask": mask,
                                "advantages": torch.zeros(len(ids))},
                        num_generations=G, reward_seconds=0.0,
                        response_returns=torch.tensor(REWARDS)[rank * 4:(rank + 1) * 4])
    return trainer, batch


def run_step(rank: int, width: int, accelerator) -> dict:
    trainer, batch = scored(rank, width, accelerator)
    TokenLevelAdvantages(shaping).on_scored(trainer, batch)
    FactlabGRPOTrainer.log_advantages(trainer, batch)
    adv = batch.output["advantages"]
    return {"advantages": [row[:n].tolist() for row, n in zip(adv, LENGTHS[rank])],
            "metrics": {k: v[-1] for k, v in trainer._metrics["train"].items() if not k.startswith("timing/")}}


WORKER = textwrap.dedent("""
    import json, os, sys
    rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    sys.path.insert(0, sys.argv[4])
    from accelerate import Accelerator
    import test_multiprocess as T
    acc = Accelerator(cpu=True)
    assert acc.num_processes == 2 and acc.process_index == rank, (acc.num_processes, acc.process_index)
    result = T.run_step(rank, [5, 7][rank], acc)
    result["backend"] = acc.state.backend
    json.dump(result, open(out, "w"))
    acc.wait_for_everyone()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_match_one(tmp_path):
    from pathlib import Path

    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    here = str(Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), port, str(tmp_path / f"{r}.json"), here],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    parts = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    assert parts[0]["backend"] == "gloo"

    single = SimpleNamespace(gather=lambda t: t, process_index=0, device=torch.device("cpu"))
    rows = {}
    for rank in (0, 1):  # the same eight completions in one process, padded to one width
        trainer, batch = scored(rank, 7, single)
        rows[rank] = batch
    merged_ids = rows[0].completion_ids + rows[1].completion_ids
    mask = torch.cat([rows[0].output["completion_mask"], rows[1].output["completion_mask"]])
    trainer, batch = scored(0, 7, single)
    batch.completion_ids, batch.completions, batch.rows = merged_ids, ["x"] * 8, [{}] * 8
    batch.response_returns = torch.tensor(REWARDS)
    batch.output = {"completion_ids": torch.zeros_like(mask), "completion_mask": mask, "advantages": torch.zeros(8)}
    TokenLevelAdvantages(shaping).on_scored(trainer, batch)
    FactlabGRPOTrainer.log_advantages(trainer, batch)
    lengths = LENGTHS[0] + LENGTHS[1]
    expected = [row[:n].tolist() for row, n in zip(batch.output["advantages"], lengths)]
    got = parts[0]["advantages"] + parts[1]["advantages"]
    assert len(got) == 8
    for g, e in zip(got, expected):
        assert torch.allclose(torch.tensor(g), torch.tensor(e), atol=1e-6)
    logged = {k: v[-1] for k, v in trainer._metrics["train"].items() if not k.startswith("timing/")}
    for rank in (0, 1):
        assert parts[rank]["metrics"].keys() == logged.keys()
        for k, v in logged.items():
            assert abs(parts[rank]["metrics"][k] - v) < 1e-5, (rank, k)
    assert logged["advantages/group_spread"] > 0 and logged["stepwise/n"] == sum(lengths) / 8
