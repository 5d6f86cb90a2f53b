"""The experiment configs every notebook's params build on.

``ExperimentConfig`` holds what every notebook shares: the model, the mini-world, the
short-form evaluation sets and how to generate for them. ``TrainingConfig`` adds what every
training notebook shares: the ``rewards:`` list (any registered rewards of any paper, see
``factlab.rewards``), TRL's GRPO knobs, LoRA, and the shared resources those rewards draw
on (judge, datastore, index, extractor, claim verifier; each built only if a reward or a
stage asks for it). Each paper's config extends one of them beside its code
(``recipes.corver.CorVerConfig``, ``recipes.rar.RARConfig``, ``recipes.seva.SevaConfig``); the
notebook -> config map lives in ``factlab.runner``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .config import MAX_TOKENS, ParamError, Section
from .corpus.infinigram import IndexSection
from .corpus.retrieval import DatastoreSection
from .credentials import UNREDACTED
from .data import EvalDataConfig, TrainDataConfig
from .data.miniworld import WorldConfig
from .eval.alarms import AlarmsSection
from .organism import is_organism
from .rewards.rar import ClaimVerifierSection
from .rewards.registry import RewardSpec, check_reward_list
from .rewards.triplets import ExtractorSection
from .sections import GenerationConfig, GRPOSection, JudgeSection, LoraSection, ModelConfig, SFTSection, SweepSection

__all__ = ["MAX_GPU_SHARE", "vllm_shares", "ExperimentConfig", "TrainingConfig", "QuickstartConfig", "EvidenceArm",
           "EvidenceSection", "BASE_ARM", "Comparison", "Hypothesis", "HYPOTHESES", "arm_folder_name",
           "WarmStartSection", "WarmStartSFTSection"]

MAX_GPU_SHARE = 0.95  # vLLM shares of one GPU together; the rest is the CUDA context and the trainer's minimum


def vllm_shares(cfg: Any) -> list[tuple[str, float]]:
    """(dotted key, share) of every vLLM engine a training config starts on one GPU: ``backend:
    vllm`` judges anywhere in it (sections or reward args) and the colocated rollout engine."""
    found: list[tuple[str, float]] = []

    def visit(node: Any, where: str) -> None:
        if isinstance(node, JudgeSection):
            if node.backend == "vllm":
                found.append((f"{where}.gpu_memory_utilization", node.gpu_memory_utilization))
            return
        if isinstance(node, dict) and node.get("backend") == "vllm":
            found.append((f"{where}.gpu_memory_utilization",
                          float(node.get("gpu_memory_utilization", JudgeSection.model_fields[
                              "gpu_memory_utilization"].default))))
            return
        if isinstance(node, Section):
            for name in type(node).model_fields:
                visit(getattr(node, name), f"{where}.{name}" if where else name)
        elif isinstance(node, dict):
            for k, v in node.items():
                visit(v, f"{where}.{k}" if where else str(k))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                visit(v, f"{where}.{i}" if where else str(i))

    visit(cfg, "")
    grpo = getattr(cfg, "grpo", None)
    if grpo is not None and grpo.use_vllm and grpo.vllm_mode == "colocate":
        found.append(("grpo.vllm_gpu_memory_utilization", grpo.vllm_gpu_memory_utilization))
    return found


LENGTH_REWARDS = ("overlong", "length_penalty")  # rewards whose args.max_len is a completion length in tokens
POLICY_ORGANISM = "organism"  # ``index: {corpus: organism}``: the policy organism's own pretraining corpus


class ExperimentConfig(Section):
    """Sections every notebook has: model, mini-world, short-form eval sets, eval generation."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    eval: list[EvalDataConfig] = [EvalDataConfig()]
    eval_generation: GenerationConfig = GenerationConfig()
    sweep: SweepSection | None = None  # read by `factlab sweep` only (factlab.sweep); a run ignores it


BASE_ARM = "base"  # the untrained start of an evidence run (factlab.evidence)
_PATH_CHARACTERS = re.compile(r"[/\\\x00-\x1f\x7f]")
MAX_ARM_FOLDER_BYTES = 200


def arm_folder_name(name: str) -> str:
    """The folder of an evidence arm under ``evidence/``: its name with whitespace as ``_``.
    ``ValueError`` for a name that is not one plain folder name (a ``/``, ``\\``, a control
    character, ``.`` or ``..``, a leading dot): it would write outside its folder."""
    if not name.strip() or _PATH_CHARACTERS.search(name) or name.strip().startswith("."):
        raise ValueError(f"arm name {name!r} is not a plain folder name (no /, \\, control characters or "
                         f"leading dot)")
    folder = re.sub(r"\s", "_", name)
    if len(folder.encode("utf-8")) > MAX_ARM_FOLDER_BYTES:  # a file system's 255 (its seed folders and files sit below)
        raise ValueError(f"arm name {name[:40]!r}... is {len(folder.encode('utf-8'))} bytes long, more than "
                         f"{MAX_ARM_FOLDER_BYTES} for a folder name; shorten it")
    return folder


def _same_folder(folder: str) -> str:
    """The key under which two arm folders are one on a case-insensitive, normalizing file system
    (macOS, Windows): ``A1`` and ``a1``, ``é`` composed and decomposed."""
    return unicodedata.normalize("NFC", folder).casefold()


# Each paper's claim as a pre-registered hypothesis (``factlab.evidence`` runs and reads them); here, below
# the params, so that ``evidence.hypothesis`` and its arms are checked when params load.
Direction = Literal["higher", "lower", "not lower"]


@dataclass(frozen=True)
class Comparison:
    """One effect: ``metric`` of ``treatment`` minus ``control`` (``base``: the untrained start),
    expected ``direction``; ``per``: ``question`` (evaluation rows) or ``step`` (training curves,
    paired on the step: a per-step training statistic); ``scale``: ``cpu_minutes`` divides the
    effect by the treatment's mean training CPU minutes (truth gain per CPU-minute), only where the
    two arms' costs differ (``evidence.COST_TIE``); arms that cost the same get the plain effect."""

    metric: str
    treatment: str
    control: str
    direction: Direction
    per: Literal["question", "step"] = "question"
    scale: Literal["none", "cpu_minutes"] = "none"
    primary: bool = True
    # the questions it is measured on: an exposure bucket of the organism's countries (``known``,
    # ``unknown``, ``rare`` = every ``rare-<dose>``, or one ``rare-<dose>``); None = every question
    subset: str | None = None
    # a "not lower" guard's non-inferiority margin: held when the interval's low end is above
    # -margin, not held when its high end is below -margin, else null (not shown). None: the
    # first round's rule (not held only when the whole interval is below 0)
    margin: float | None = None

    def label(self, scaled: bool | None = None) -> str:
        """``scaled``: whether the per-CPU-minute scale was applied (default: whenever it is asked for)."""
        unit = " per CPU-minute" if self.scale == "cpu_minutes" and scaled is not False else ""
        where = f" on {self.subset}" if self.subset else ""
        bound = f" (margin {self.margin:g})" if self.margin is not None else ""
        return f"{self.metric}{where}{unit}: {self.treatment} - {self.control}{bound}"


@dataclass(frozen=True)
class Hypothesis:
    name: str
    notebook: str
    claim: str  # the hypothesis as written in README before the runs
    comparisons: tuple[Comparison, ...]
    paper: str = ""
    model: str = "smollm2-135m-instruct"  # the policy it is tested on (the organism's hypotheses: organism)
    # ``evidence``: a pre-registered claim, run by ``factlab evidence`` into ``results/``; ``smoke``:
    # the before -> after check of a notebook's organism params (``params/<nb>_organism.yaml``: its headline, with an
    # interval), never a result (``factlab evidence`` runs it only when named)
    kind: Literal["evidence", "smoke"] = "evidence"
    params_name: str | None = None  # its params file's stem, where two hypotheses share a notebook

    @property
    def params(self) -> str:
        if self.params_name:
            return f"params/{self.params_name}.yaml"
        if self.kind == "smoke":
            return f"params/{self.notebook}_organism.yaml"
        suffix = "_organism_evidence" if self.model.startswith("organism") else "_evidence"
        return f"params/{self.notebook}{suffix}.yaml"


# Comparisons two organism hypotheses share (one claim on two bases, or on two budgets)
BINARY_RAR_VS_BASE = (  # 001's claim against the base: wrong on unknown falls, known correct within 0.03, abstains more
    Comparison("wrong", "binary", BASE_ARM, "lower", subset="unknown"),
    Comparison("correct", "binary", BASE_ARM, "not lower", subset="known", margin=0.03, primary=False),
    Comparison("abstain", "binary", BASE_ARM, "higher", subset="unknown", primary=False))
SEVA_PROCESS_VS_BINARY = (  # 002 §2.3: held-out verifier accuracy rises; format and the advantage share beside it
    Comparison("correct", "process", "binary", "higher"),
    Comparison("format_ok", "process", "binary", "higher", primary=False),
    Comparison("nonzero_advantage", "process", "binary", "higher", per="step", primary=False))
KLCF_VS_BASE = (  # 004 §4: KB precision rises; supported facts per answer within 0.1 of the base
    Comparison("kb_precision", "klcf", BASE_ARM, "higher"),
    Comparison("supported", "klcf", BASE_ARM, "not lower", margin=0.1, primary=False))
CORVER_FULL_VS_A1 = (  # 000 Table 4's A1 ablation: fewer contradicted sentences, correct within 0.03
    Comparison("contradicted", "full", "A1", "lower"),
    Comparison("correct", "full", "A1", "not lower", margin=0.03, primary=False))

K2V_GATED_VS_NO_GATE = (  # 003 §4.3: the answer gate raises rare-country exact accuracy over no_gate and the base
    Comparison("correct", "gated", "no_gate", "higher", subset="rare"),
    Comparison("correct", "gated", BASE_ARM, "higher", subset="rare", primary=False))

HYPOTHESES: dict[str, Hypothesis] = {h.name: h for h in (
    Hypothesis("corver", "01_corver",
               "The full CorVer reward (judge + format + co-occurrence) leaves fewer contradicted sentences in "
               "held-out answers than A1 (no co-occurrence term), with held-out accuracy not lower.",
               (Comparison("contradicted", "full", "A1", "lower"),
                Comparison("correct", "full", "A1", "not lower", primary=False)),
               "000 §3.4, Table 4 (A1)"),
    Hypothesis("binary_rar", "02_binary_rar",
               "Binary RAR on short-form questions gives fewer wrong answers and more abstentions than the base "
               "model and than rating RAR (001 reports 44% fewer incorrect answers on PopQA).",
               (Comparison("wrong", "binary", BASE_ARM, "lower"),
                Comparison("abstain", "binary", BASE_ARM, "higher", primary=False),
                Comparison("wrong", "binary", "rating", "lower", primary=False),
                Comparison("abstain", "binary", "rating", "higher", primary=False)),
               "001 §5, Table 2"),
    Hypothesis("seva", "03_seva",
               "SEVA's process reward gives a higher share of groups with a nonzero advantage than the binary "
               "control, a higher format rate, and a held-out verifier accuracy not lower.",
               (Comparison("nonzero_advantage", "process", "binary", "higher", per="step"),
                Comparison("format_ok", "process", "binary", "higher", primary=False),
                Comparison("correct", "process", "binary", "not lower", primary=False)),
               "002 §2.3, Table 5, Figures 4-5"),
    Hypothesis("k2v", "04_k2v",
               "The answer-gated K2V reward gives a higher held-out fill-in-blank exact accuracy than no_gate "
               "and than the base model.",
               (Comparison("correct", "gated", "no_gate", "higher"),
                Comparison("correct", "gated", BASE_ARM, "higher", primary=False)),
               "003 §4.3, Table 3"),
    Hypothesis("klcf", "05_klcf",
               "KLCF training raises the KB precision of long-form answers over the base model, with not fewer "
               "supported claims per answer.",
               (Comparison("kb_precision", "klcf", BASE_ARM, "higher"),
                Comparison("supported", "klcf", BASE_ARM, "not lower", primary=False)),
               "004 §4, Table 1"),
    Hypothesis("compare", "06_compare",
               "On one budget, every reward family raises the held-out truth score per CPU-minute of training "
               "more with verdict: kb (a perfect judge) than with the 135M judge.",
               # the claim is "every family": each family's comparison is primary, so the hypothesis holds only
               # when all four hold (``evidence.overall``). The first record made only Binary RAR primary
               # (issue 41: "held" with three of four families null); the table reads it by this rule.
               tuple(Comparison("truth", f"{fam} kb", f"{fam} judge", "higher", scale="cpu_minutes")
                     for fam in ("Binary RAR", "K2V", "KLCF", "SEVA claims")),
               "all five papers"),
    # ---- round 2, on the knowledge organism (README "Evidence on the organism"; issue 41). Held-out
    # questions are about countries no RL run trained on, in exposure buckets (``organism.qa_items``).
    Hypothesis("organism_binary_rar", "02_binary_rar",
               "On the organism, Binary RAR lowers the wrong-answer rate on unknown countries against the base "
               "organism and against rating RAR, while correct answers on known countries fall by less than the "
               "margin (0.03).",
               (Comparison("wrong", "binary", BASE_ARM, "lower", subset="unknown"),
                Comparison("correct", "binary", BASE_ARM, "not lower", subset="known", margin=0.03, primary=False),
                Comparison("wrong", "binary", "rating", "lower", subset="unknown", primary=False),
                Comparison("abstain", "binary", BASE_ARM, "higher", subset="unknown", primary=False)),
               "001 §5, Table 2", model="organism"),
    Hypothesis("organism_corver", "01_corver",
               "On the organism, the full CorVer reward leaves fewer contradicted sentences per held-out answer "
               "than A1 (no co-occurrence term), while held-out correct answers fall by less than the margin (0.03).",
               CORVER_FULL_VS_A1,
               "000 §3.4, Table 4 (A1)", model="organism"),
    Hypothesis("organism_seva", "03_seva",
               "On the organism, SEVA's process reward gives a higher held-out verifier accuracy than the binary "
               "reward; the share of groups with a nonzero advantage is reported as a mechanism check.",
               SEVA_PROCESS_VS_BINARY, "002 §2.3, §3, Tables 5, 15", model="organism"),
    Hypothesis("organism_k2v", "04_k2v",
               "On the organism, the answer-gated K2V reward raises exact fill-in-blank accuracy on rare countries "
               "over no_gate and over the base organism.",
               K2V_GATED_VS_NO_GATE,
               "003 §4.3, Table 3", model="organism"),
    Hypothesis("organism_klcf", "05_klcf",
               "On the organism, KLCF training raises the KB precision of long-form answers over the base "
               "organism, while supported facts per answer fall by less than the margin (0.1).",
               KLCF_VS_BASE, "004 §4, Table 1", model="organism"),
    # A follow-up registered after organism_binary_rar read null with no abstention sampled (abstain 0 on every seed):
    # a reward that pays for abstaining can only reinforce an abstention the policy samples. The hesitant organism
    # (organism regime "hesitant": 2 of its 24 unfamiliar fine-tuning countries answered "I don't know") still
    # hallucinates on unknown countries; the claim is 001's on that base.
    Hypothesis("organism_binary_rar_hesitant", "02_binary_rar",
               "On the hesitant organism (a base that samples an abstention now and then), Binary RAR lowers the "
               "wrong-answer rate on unknown countries against the base, abstains more there, and correct answers on "
               "known countries fall by less than the margin (0.03).",
               BINARY_RAR_VS_BASE,
               "001 §5, Table 2", model="organism", params_name="02_binary_rar_hesitant_evidence"),
    # Kang et al. 2024 (2403.05612): a reward whose judge hallucinates on unfamiliar facts undermines factuality RL.
    # One reward (Binary RAR, 001), four judges: the exact truth (verdict: kb), the truth with its verdicts flipped at
    # a seeded rate eps of 0.1 and 0.25, and the organism itself as the judge (verdict: organism: its own greedy
    # answer is the evidence: right where it knows a country, a confident guess where it does not). Held only when
    # all three primaries hold (the effect shrinks monotonically in eps, and under the hallucinating judge).
    Hypothesis("reward_hallucination", "02_binary_rar",
               "Binary RAR's fall in wrong answers on unknown countries shrinks as its judge hallucinates: more wrong "
               "answers remain at eps 0.1 than at eps 0, more at eps 0.25 than at 0.1, and more under the organism "
               "judge (which guesses where it does not know) than under the exact truth.",
               (Comparison("wrong", "eps0.1", "eps0", "higher", subset="unknown"),
                Comparison("wrong", "eps0.25", "eps0.1", "higher", subset="unknown"),
                Comparison("wrong", "organism_judge", "eps0", "higher", subset="unknown"),
                Comparison("wrong", "eps0", BASE_ARM, "lower", subset="unknown", primary=False),
                Comparison("abstain", "organism_judge", "eps0", "lower", subset="unknown", primary=False)),
               "001 §5; Kang et al. 2024", model="organism", params_name="02_binary_rar_hallucination_evidence"),
    # ---- round 3 (README "Evidence on the organism", round 3; registered 2026-11-28 before any run): hundreds of
    # GRPO steps, affordable once the CPU LM head scored only completion tokens (bench/bench_cpu_logprob.py)
    Hypothesis("organism_binary_rar_wary", "02_binary_rar",
               "On the wary organism (a base that samples an abstention on unknown countries and still answers them "
               "wrong greedily), 300 steps of Binary RAR lower the wrong-answer rate on unknown countries against "
               "the base and abstain more there, while correct answers on known countries fall by less than the "
               "margin (0.03).",
               BINARY_RAR_VS_BASE,
               "001 §5, Table 2", model="organism", params_name="02_binary_rar_wary_evidence"),
    Hypothesis("organism_corver_long", "01_corver",
               "On the organism, 200 steps of the full CorVer reward leave fewer contradicted sentences per held-out "
               "answer than A1 (no co-occurrence term), while held-out correct answers fall by less than the margin "
               "(0.03).",
               CORVER_FULL_VS_A1,
               "000 §3.4, Table 4 (A1)", model="organism", params_name="01_corver_organism_long_evidence"),
    Hypothesis("organism_seva_dose", "03_seva",
               "On the organism, SEVA's process reward gives a higher held-out verifier accuracy than the binary "
               "reward after 20 steps (150 held-out pairs), read also at step 10; the share of groups with a "
               "nonzero advantage is reported as a mechanism check.",
               SEVA_PROCESS_VS_BINARY, "002 §2.3, §3, Tables 5, 15", model="organism",
               params_name="03_seva_organism_dose_evidence"),
    Hypothesis("organism_klcf_long", "05_klcf",
               "On the organism, 120 steps of KLCF training raise the KB precision of long-form answers over the "
               "base organism, while supported facts per answer fall by less than the margin (0.1).",
               KLCF_VS_BASE, "004 §4, Table 1", model="organism", params_name="05_klcf_organism_long_evidence"),
    # Registered 2026-11-28 after round 3 was read, before its own run: Kang et al.'s claim on the one reward measured to
    # move the organism (organism_klcf_long held; organism_klcf's arm, 60 steps, reached ~0.0-0.1 contradicted sentences
    # per answer from the base's 2.32 on every seed). KLCF's reward with its kb verdicts (the checklist verifier's
    # labels and the truthfulness RM's per-claim verdicts) flipped at a seeded rate eps: the RM holds a wrong belief
    # about a fixed eps of the claims, so the policy can be paid for stating those falsehoods. The primary metric is
    # contradicted sentences per answer (every answer counts; KB precision is read only where something is verifiable,
    # and its seeds spread 0.15-0.88 at 60 steps). Held only when both primaries hold (monotone in eps).
    Hypothesis("reward_hallucination_klcf", "05_klcf",
               "KLCF's fall in contradicted sentences per held-out long-form answer shrinks as its verdicts hallucinate: "
               "more contradicted sentences remain at eps 0.1 than at eps 0, and more at eps 0.25 than at 0.1.",
               (Comparison("contradicted", "eps0.1", "eps0", "higher"),
                Comparison("contradicted", "eps0.25", "eps0.1", "higher"),
                Comparison("contradicted", "eps0", BASE_ARM, "lower", primary=False),
                Comparison("kb_precision", "eps0.25", "eps0", "lower", primary=False)),
               "004 §2.3.1; Kang et al. 2024", model="organism", params_name="05_klcf_hallucination_evidence"),
    # Registered 2026-11-28 after reward_hallucination_klcf read null (random flips of a quarter of the verdicts left the
    # reward's ranking of each group by the truth intact), before its own run: Kang et al.'s judge, wrong where it does
    # not know. KLCF's truthfulness RM is an organism's own greedy belief about each claim (verdict: organism): the
    # policy's own organism (it knows what the policy knows and guesses where the policy guesses, so it pays for the
    # policy's own confident falsehoods) and the organism built without augmentation (organism-noaug: it read the same
    # facts but extracts fewer: 0.86 of known countries' held-out questions against 0.98), against the exact truth.
    # Held only when both primaries hold (the effect shrinks as the judge knows less).
    Hypothesis("reward_hallucination_klcf_judge", "05_klcf",
               "KLCF's fall in contradicted sentences per held-out long-form answer shrinks as its truthfulness RM knows "
               "less: more contradicted sentences remain when the RM is the policy's own organism than under the exact "
               "truth, and more when it is the organism built without augmentation than when it is the policy's own.",
               (Comparison("contradicted", "organism_judge", "eps0", "higher"),
                Comparison("contradicted", "noaug_judge", "organism_judge", "higher"),
                Comparison("contradicted", "organism_judge", "eps0", "higher", subset="unknown", primary=False),
                Comparison("contradicted", "eps0", BASE_ARM, "lower", primary=False)),
               "004 §2.3.1; Kang et al. 2024", model="organism", params_name="05_klcf_judge_evidence"),
    # Registered 2026-11-28 after organism_k2v's arms were found to have stopped at 22-28 of 60 planned DAPO steps (gated
    # fewer than no_gate: transformers planned epochs of one batch a step, refills took more; fixed in eebac63), before
    # its own run: organism_k2v's claim and arms with every step trained, the same count in both arms.
    Hypothesis("organism_k2v_steps", "04_k2v",
               "On the organism, 40 DAPO steps (every one trained, in both arms) of the answer-gated K2V reward raise "
               "exact fill-in-blank accuracy on rare countries over no_gate and over the base organism.",
               K2V_GATED_VS_NO_GATE,
               "003 §4.3, Table 3", model="organism", params_name="04_k2v_organism_steps_evidence"),
    # Registered 2026-11-28 after organism_k2v_steps read held with its interval's lower end near 0, before its own run:
    # the same design on five new seeds (5-9), a replication.
    Hypothesis("organism_k2v_steps_replication", "04_k2v",
               "On five new seeds, 40 DAPO steps of the answer-gated K2V reward again raise exact fill-in-blank "
               "accuracy on rare countries over no_gate (and over the base organism).",
               K2V_GATED_VS_NO_GATE,
               "003 §4.3, Table 3", model="organism", params_name="04_k2v_organism_steps_replication_evidence"),
    # ---- the organism params' before -> after checks (params/<nb>_organism.yaml, the smoke once measured): each
    # training notebook's treatment arm against the
    # base organism on its paper's primary truth metric, 3 seeds, a short budget (issue 40 item 5)
    Hypothesis("smoke_corver", "01_corver", "CorVer training lowers contradicted sentences per held-out answer.",
               (Comparison("contradicted", "full", BASE_ARM, "lower"),
                Comparison("correct", "full", BASE_ARM, "not lower", margin=0.03, primary=False)),
               "000 §3.4", model="organism", kind="smoke"),
    Hypothesis("smoke_binary_rar", "02_binary_rar",
               "Binary RAR lowers the wrong-answer rate on unknown countries.",
               (Comparison("wrong", "binary", BASE_ARM, "lower", subset="unknown"),
                Comparison("abstain", "binary", BASE_ARM, "higher", subset="unknown", primary=False),
                Comparison("correct", "binary", BASE_ARM, "not lower", subset="known", margin=0.03, primary=False)),
               "001 §5", model="organism", kind="smoke"),
    Hypothesis("smoke_seva", "03_seva", "SEVA's process reward raises held-out verifier accuracy.",
               (Comparison("correct", "process", BASE_ARM, "higher"),
                Comparison("format_ok", "process", BASE_ARM, "higher", primary=False)),
               "002 §3", model="organism", kind="smoke"),
    Hypothesis("smoke_k2v", "04_k2v", "The answer-gated K2V reward raises exact fill-in-blank accuracy on rare countries.",
               (Comparison("correct", "gated", BASE_ARM, "higher", subset="rare"),),
               "003 §4.3", model="organism", kind="smoke"),
    Hypothesis("smoke_klcf", "05_klcf", "KLCF training raises the KB precision of long-form answers.",
               (Comparison("kb_precision", "klcf", BASE_ARM, "higher"),
                Comparison("supported", "klcf", BASE_ARM, "not lower", margin=0.1, primary=False)),
               "004 §4", model="organism", kind="smoke"),
)}
EVIDENCE_HYPOTHESES = [n for n, h in HYPOTHESES.items() if h.kind == "evidence"]  # what `factlab evidence` runs



class EvidenceArm(Section):
    """One arm: a name and its reward list (any registered rewards); ``grpo`` overrides the
    run's GRPO section for this arm only (e.g. a longer run for a slower family is not the
    same budget: use it only when the hypothesis says so)."""

    name: str
    rewards: list[RewardSpec]
    grpo: dict[str, Any] = {}

    @field_validator("rewards")
    @classmethod
    def _reward_list(cls, specs: list[RewardSpec]) -> list[RewardSpec]:
        check_reward_list(specs)
        return specs


class EvidenceSection(Section):
    """``evidence:`` of a notebook's ``*_evidence.yaml``: the hypothesis it tests (a name of
    ``factlab.evidence.HYPOTHESES``), the arms trained, the seeds (3 or more: an interval over
    one seed says nothing about seeds) and how many held-out questions each arm answers."""

    hypothesis: str
    arms: list[EvidenceArm]
    seeds: list[int] = [0, 1, 2]
    heldout: int = Field(48, ge=4)
    # the questions the arms train on, where the notebook's own training rows are not the hypothesis's
    # (02: short-form questions under 001 §4.1's abstain prompt); mini-world train split only
    train_data: TrainDataConfig | None = None
    max_new_tokens: int = Field(48, ge=1, le=MAX_TOKENS)  # greedy answers to the held-out rows
    # the evidence budget: GRPO settings for every arm (steps, learning rate), over the run's own grpo:
    # section, which the notebook's other stages keep (checked against GRPOSection when params load)
    grpo: dict[str, Any] = {}
    # dose-response (issue 41): every (arm, seed) policy is also evaluated at these global steps
    # (snapshots saved while it trains), so a hypothesis' effect can be read at several step counts
    dose_steps: list[int] = []
    # forked processes that train the (arm, seed) runs side by side, one torch thread each
    # (factlab.forked; bench/bench_evidence_workers.py on 2 cores: two 4-step jobs in 0.77x the time of one after the other)
    workers: int = Field(1, ge=1, le=64)
    # the power analysis' pilot (issue 41; factlab evidence --pilot NAME): the held-out rows answered by the
    # base alone, no arm trained; factlab.evidence.power_analysis reads its rows
    pilot: bool = False

    @field_validator("dose_steps")
    @classmethod
    def _positive_steps(cls, steps: list[int]) -> list[int]:
        if any(s < 1 for s in steps) or len(set(steps)) < len(steps):
            raise ValueError(f"dose_steps must be distinct global steps >= 1, got {steps}")
        return sorted(steps)

    @field_validator("seeds")
    @classmethod
    def _three_seeds(cls, seeds: list[int]) -> list[int]:
        if len(seeds) < 3 or len(set(seeds)) < len(seeds):
            raise ValueError(f"an evidence run needs 3 or more distinct seeds, got {seeds}")
        return seeds

    @field_validator("hypothesis")
    @classmethod
    def _known_hypothesis(cls, name: str) -> str:
        if name not in HYPOTHESES:
            raise ValueError(f"unknown hypothesis {name!r}; known: {', '.join(HYPOTHESES)}")
        return name

    @field_validator("arms")
    @classmethod
    def _named_arms(cls, arms: list[EvidenceArm]) -> list[EvidenceArm]:
        names = [a.name for a in arms]
        if not arms or len(set(names)) < len(names) or BASE_ARM in names:
            raise ValueError(f"arm names must be unique, non-empty and not '{BASE_ARM}': {names}")
        folders: dict[str, str] = {_same_folder(arm_folder_name(BASE_ARM)): BASE_ARM}
        for i, name in enumerate(names):
            folder = arm_folder_name(name)  # ValueError for path characters
            if _same_folder(folder) in folders:
                raise ParamError(f"{i}.name", f"arm {name!r} and arm {folders[_same_folder(folder)]!r} would share "
                                              f"the folder {folder!r} (spaces become _; macOS and Windows do not tell "
                                              "case apart); rename one")
            folders[_same_folder(folder)] = name
        return arms

    @model_validator(mode="after")
    def _arms_of_the_hypothesis(self) -> "EvidenceSection":
        arms = {a.name for a in self.arms} | {BASE_ARM}
        for c in HYPOTHESES[self.hypothesis].comparisons:
            for arm in (c.treatment, c.control):
                if arm not in arms:
                    raise ParamError("arms", f"hypothesis {self.hypothesis!r} compares arm {arm!r} ({c.label()}), "
                                             f"which is not among the arms {sorted(arms - {BASE_ARM})}")
        return self


class WarmStartSFTSection(SFTSection):
    """The warm start's SFT (TRL ``SFTConfig`` knobs, ``recipes.warmstart``): one epoch on CPU,
    micro-batches of 8 demonstrations of similar length (prompt-completion, loss on the completion
    only), no activation checkpointing. Its own defaults, so ``warm_start: {sft: {learning_rate:
    ...}}`` keeps the rest of them (not SEVA's SFT defaults)."""

    learning_rate: float = Field(3.0e-4, gt=0.0)
    num_train_epochs: float = Field(1.0, gt=0.0)
    per_device_train_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_length: int = Field(320, ge=16)
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    bf16: bool = False
    gradient_checkpointing: bool = False
    save_steps: int = Field(5, ge=1)
    save_total_limit: int | None = 1
    seed: int = 0
    extra: dict[str, Any] = {"train_sampling_strategy": "group_by_length"}


class WarmStartSection(Section):
    """A short SFT before RL (``factlab.recipes.warmstart``): demonstrations of every training
    notebook's answer format, written from the mini-world's facts (train split only), teach a
    small policy the format the rewards read, so that RL starts where rewards vary within a
    group. Off by default (the papers start from instruction-tuned models that need none); the
    smoke params turn it on. Every setting here is part of the warm start's cache key.

    Counts are demonstrations per format (0 leaves a format out): ``corver_qa`` 01 / 06's
    training prompt (000 §A.3), ``corver_eval`` 000 §A.3's evaluation prompt, ``rar_shortform``
    001 §4.1's abstain / forced prompts, ``rar_longform`` 02's "Tell me about <country>."
    (001 §3.3), ``k2v`` 04's fill-in-blank questions (003 §3.1, §3.3), ``klcf`` 05's Prompt 5
    (004 §2.3.3). ``abstain_fraction``: the share of Binary RAR's abstain-prompt and long-form
    demonstrations that answer "I don't know" (it pays an abstention, 001 §3.2), each about one of
    the least populous ``abstain_fraction`` of the train countries. ``train_top_layers``: a full
    fine-tune of the last N decoder layers only (backpropagation stops there: about half the
    compute of all 30 layers on CPU); ignored with ``lora:``."""

    enabled: bool = False
    corver_qa: int = Field(20, ge=0)
    corver_eval: int = Field(6, ge=0)
    rar_shortform: int = Field(12, ge=0)
    rar_longform: int = Field(8, ge=0)
    k2v: int = Field(12, ge=0)
    klcf: int = Field(8, ge=0)
    abstain_fraction: float = Field(0.25, ge=0.0, lt=1.0)
    longform_facts: int = Field(3, ge=1)  # fact sentences per long-form answer
    seed: int = 0
    sft: WarmStartSFTSection = WarmStartSFTSection()
    lora: LoraSection | None = None  # null: full fine-tuning (a LoRA run is merged into a plain folder)
    train_top_layers: int | None = Field(8, ge=1)  # full fine-tuning of the last N decoder layers only (null: all)
    check_questions: int = Field(4, ge=0)  # held-out prompts per format for the raw / warm check (0: none)
    check_max_new_tokens: int = Field(40, ge=1)

    @model_validator(mode="after")
    def _something_to_learn(self) -> "WarmStartSection":
        if self.lora is not None and self.train_top_layers is not None:
            if "train_top_layers" in self.model_fields_set:
                raise ParamError("train_top_layers", "freezes layers of a full fine-tune; with `lora:` set, choose "
                                                     "the layers through lora.target_modules instead")
            self.__dict__["train_top_layers"] = None  # the default applies to a full fine-tune only
        if self.enabled and not any(getattr(self, k) for k in ("corver_qa", "corver_eval", "rar_shortform",
                                                                "rar_longform", "k2v", "klcf")):
            raise ParamError("enabled", "every demonstration count is 0: nothing to warm-start on")
        return self


class TrainingConfig(ExperimentConfig):
    """Sections every training notebook has: rewards, GRPO, LoRA and the shared resources.

    ``rewards`` is the run's reward list (``factlab.rewards``); a run may mix rewards of
    different papers. ``lora: null`` trains every parameter."""

    rewards: list[RewardSpec] = [RewardSpec(name="qa_judge"), RewardSpec(name="format")]
    grpo: GRPOSection = GRPOSection()
    lora: LoraSection | None = LoraSection()
    judge: JudgeSection = JudgeSection()
    datastore: DatastoreSection = DatastoreSection()
    index: IndexSection = IndexSection()
    extractor: ExtractorSection = ExtractorSection()
    verifier: ClaimVerifierSection = ClaimVerifierSection()
    alarms: AlarmsSection = AlarmsSection()  # reward-hacking alarm thresholds (factlab.eval.alarms)
    # a pre-registered hypothesis's arms and seeds (params/<notebook>_evidence.yaml; factlab.evidence); None: no
    # evidence cell runs
    evidence: EvidenceSection | None = None
    warm_start: WarmStartSection = WarmStartSection()  # SFT on format demonstrations before RL (recipes.warmstart)

    @field_validator("rewards")
    @classmethod
    def _reward_list(cls, specs: list[RewardSpec]) -> list[RewardSpec]:
        if not specs:
            raise ParamError("", "a training run needs at least one reward")
        check_reward_list(specs)
        return specs

    @model_validator(mode="after")
    def _length_rewards_within_completion(self) -> "TrainingConfig":
        """A length reward's ``max_len`` (DAPO's overlong L_max, KLCF's length penalty L_m, Eq. 11)
        may not pass ``grpo.max_completion_length``: completions stop before it, so the penalty
        would never reach its full value (DAPO and KLCF set them equal)."""
        for i, spec in enumerate(self.rewards):
            max_len = (spec.args or {}).get("max_len")
            if spec.name in LENGTH_REWARDS and isinstance(max_len, int) and max_len > self.grpo.max_completion_length:
                raise ParamError(f"rewards.{i}.args.max_len",
                                 f"{max_len} is above grpo.max_completion_length = {self.grpo.max_completion_length}: "
                                 f"completions stop before the {spec.name} penalty ends, so it would never reach its "
                                 f"full value (set them equal)")
        return self

    @model_validator(mode="after")
    def _gpu_shares_fit(self) -> "TrainingConfig":
        """The GPU shares vLLM engines take on one GPU: every ``backend: vllm`` judge's
        ``gpu_memory_utilization`` plus the colocated rollout engine's
        (``grpo.vllm_gpu_memory_utilization``) may not pass ``MAX_GPU_SHARE``: vLLM reserves its
        share when it starts, so a sum above the whole GPU fails there (issue 42), after hours of
        preparation."""
        shares = vllm_shares(self)
        total = sum(s for _, s in shares)
        if shares and total > MAX_GPU_SHARE:
            parts = " + ".join(f"{where} {share:g}" for where, share in shares)
            raise ParamError(shares[-1][0], f"vLLM engines would share one GPU past {MAX_GPU_SHARE}: {parts} = "
                                            f"{total:.2f}; lower a gpu_memory_utilization, or serve the judge "
                                            f"elsewhere (backend: openai)")
        return self

    @model_validator(mode="after")
    def _index_on_the_policy_organism(self) -> "TrainingConfig":
        """``index: {corpus: organism}`` counts co-occurrence in the policy organism's own
        pretraining corpus (000 §3.2 counts in the corpus the policy was pretrained on; issue 40
        item 3: CorVer's count tiers then follow exposure). It is resolved here to the policy's
        organism name (``organism-tiny`` for a tiny policy), so a warm start that renames the
        policy keeps it; ``rewards.Resources.index`` turns an organism name into its corpus file
        (``organism.corpus_path``). Any other organism name names that organism's corpus."""
        if self.index.corpus != POLICY_ORGANISM:
            return self
        if not is_organism(self.model.name):
            raise ParamError("index.corpus", f"'{POLICY_ORGANISM}' means the policy organism's pretraining corpus, "
                                             f"but model.name {self.model.name!r} is not an organism (name one, "
                                             f"e.g. organism-tiny, or give a corpus JSONL)")
        self.index.__dict__["corpus"] = self.model.name
        return self

    @model_validator(mode="after")
    def _evidence_grpo_valid(self) -> "TrainingConfig":
        """Every evidence arm's GRPO settings (``grpo:`` + ``evidence.grpo`` + the arm's) form a
        valid ``GRPOSection``: a bad key or value is refused when params load, not at the arm."""
        if self.evidence is None:
            return self
        for where, overrides in [("evidence.grpo", self.evidence.grpo)] + [
                (f"evidence.arms.{i}.grpo", arm.grpo) for i, arm in enumerate(self.evidence.arms)]:
            unknown = sorted(set(overrides) - set(GRPOSection.model_fields))
            if unknown:
                raise ParamError(where, f"unknown GRPO keys {unknown}")
            merged = {**self.grpo.model_dump(context=UNREDACTED), **self.evidence.grpo, **(overrides if where != "evidence.grpo" else {})}
            try:
                GRPOSection.model_validate(merged)
            except ValueError as e:
                raise ParamError(where, f"not a valid grpo section with these overrides: {e}") from None
        return self

    def evidence_grpo(self, arm: EvidenceArm, seed: int) -> GRPOSection:
        """The GRPO section an evidence arm trains with: ``grpo:``, ``evidence.grpo``, the arm's own, the seed."""
        assert self.evidence is not None
        return GRPOSection.model_validate({**self.grpo.model_dump(context=UNREDACTED), **self.evidence.grpo, **arm.grpo, "seed": seed})


class QuickstartConfig(ExperimentConfig):
    """``notebooks/00_quickstart.ipynb``: evaluate a model on short-form QA (000 §4)."""

    trained_prompt: bool = False  # add the anti-loop line (000 §A.3) for adapter checkpoints
