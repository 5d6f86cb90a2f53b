"""The ``factlab`` command: run notebooks, build the mini-world, bench.

    factlab run NOTEBOOK [--params FILE] [--out DIR] [--smoke] [--verify]
    factlab run NOTEBOOK --resume RUN_DIR [--force] [--verify]
    factlab check NOTEBOOK [--params FILE] [--smoke] [--gpu-mem GB [--gpus N]]
    factlab plan NOTEBOOK [--params FILE] [--gpus N] [--gpu-mem GB] [--strategy NAME]
    factlab run-all [--full] [--out DIR] [--only NAME ...] [--jobs N] [--verify]
    factlab sweep NOTEBOOK [--params FILE] --grid KEY=V1,V2 ... [--executor local|ray] [--dry-run]
    factlab train NOTEBOOK [--params FILE] --accelerate-config {ddp,zero2,zero3,fsdp2,PATH}
                  [--num-processes N] [--set KEY=VALUE ...] [--run-dir DIR] [--dry-run]
    factlab world [--out DIR]
    factlab index build CORPUS.jsonl --tokenizer NAME_OR_PATH --out DIR [--text-field text]
                        [--shard-tokens N] [--cpus N]
    factlab index verify DIR
    factlab serve [--model NAME] [--port 8000] [--max-batch 16]
    factlab evidence [NAME ...] [--recompute | --pilot] [--resume RUN_DIR]
    factlab bench [NAME ...]
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import subprocess
import sys
from pathlib import Path

from . import threads
from .credentials import redact_text
from .corpus import CorpusIndex
from .integrity import VERIFY_ENV
from .data.miniworld import build_world, default_world_dir
from .evidence import HYPOTHESES
from .evidence import recompute as recompute_evidence
from .evidence import run as run_evidence
from .launch import add_command as add_train_command
from .plan import PlanError, load_strategy, plan_config
from .rewards import available as available_rewards
from .runall import run_all
from .runner import default_params, find_notebook, load_params, project_root, run_notebook
from .runner import sigterm_as_interrupt as _sigterm_as_interrupt
from .serve import JudgeServer
from .sweep import add_command as add_sweep_command


def _positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return x


def _out_folder(path: str | None) -> None:
    """``--out`` must be a folder (or not exist yet): checked before anything runs."""
    if path and Path(path).exists() and not Path(path).is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "--out must be a folder, and this is a file", path)


def _os_error(e: OSError) -> str:
    """One line for an OS error: the path(s) it concerns and why."""
    paths = [str(f) for f in (e.filename, e.filename2) if f is not None]
    return f"{' -> '.join(paths)}: {e.strerror or e}" if paths else str(e)


def _verify_on_every_load(args) -> None:
    """``--verify``: every index and datastore the run loads is checksummed, not only the first
    time (``factlab.integrity``); the kernel inherits the setting."""
    if getattr(args, "verify", False):
        os.environ[VERIFY_ENV] = "1"


def _cmd_run(args) -> int:
    _out_folder(args.out)
    _verify_on_every_load(args)
    try:
        with _sigterm_as_interrupt():
            res = run_notebook(args.notebook, params=args.params, out=args.out, smoke=args.smoke,
                               raise_on_error=False, resume=args.resume, with_code=args.with_code,
                               force=args.force)
    except KeyboardInterrupt:
        print("interrupted (the run folder's manifest.json says so); see the --resume line above",
              file=sys.stderr)
        return 130
    print(f"run folder: {res.run_dir}\nreport:     {res.report}")
    if not res.ok:
        print(f"FAILED: {res.error}\ncontinue it with: factlab run {Path(args.notebook).stem} --resume {res.run_dir}",
              file=sys.stderr)
        return 1
    return 0


def _cmd_evidence(args) -> int:
    if args.recompute and (args.pilot or args.resume):
        raise SystemExit("factlab evidence: --recompute reads committed rows, --pilot / --resume run a notebook: pick one")
    if args.recompute:  # effects and table from the committed rows, no training
        for s in recompute_evidence(args.names or None):
            print(f"{s['hypothesis']}: {s['verdict']} (recomputed from results/{s['hypothesis']}/rows.jsonl.gz)")
        print("results: results/README.md")
        return 0
    _out_folder(args.out)
    if args.resume and args.out:
        raise SystemExit("factlab evidence: --resume continues a run folder in place; drop --out")
    try:
        with _sigterm_as_interrupt():
            summaries = run_evidence(args.names or None, out=args.out, pilot=args.pilot, resume=args.resume)
    except KeyboardInterrupt:
        print(f"interrupted (the run folder's manifest.json says so); finish it into results/ with: factlab evidence "
              f"{' '.join(args.names) or 'NAME'}{' --pilot' if args.pilot else ''} --resume RUN_DIR, the folder named above",
              file=sys.stderr)
        return 130
    if args.pilot:  # the base alone and the power analysis (results/NAME/power.json), printed as it ran
        return 0
    for s in summaries:
        print(f"{s['hypothesis']}: {s['verdict']} ({s['cpu_minutes']:.1f} CPU minutes, {s['wall_minutes']:.1f} wall)")
    print("results: results/README.md")
    return 0


def _plan(args, nb: Path, cfg):
    """The memory plan of ``cfg`` for the command's --gpus / --gpu-mem / --strategy."""
    strategy = None
    if getattr(args, "strategy", None):
        strategy = load_strategy(args.strategy, nb.parent.parent / "params" / "accelerate")
    return plan_config(cfg, nb.stem, gpus=args.gpus, gpu_mem_gb=args.gpu_mem, strategy=strategy)


def _cmd_check(args) -> int:
    nb = find_notebook(args.notebook)
    params = Path(args.params) if args.params else default_params(nb, args.smoke)
    cfg = load_params(nb.stem, params)
    rewards = ", ".join(f"{s.name} x{s.weight:g}" for s in getattr(cfg, "rewards", [])) or "none"
    if args.gpu_mem is not None:
        try:
            plan = _plan(args, nb, cfg)
        except PlanError as e:
            print(f"error: {params}: {e}", file=sys.stderr)
            return 2
        if not plan.fits:
            print(f"error: {params} does not fit {args.gpus} x {args.gpu_mem:g} GB ({plan.strategy.name}, the last "
                  f"strategy tried): {plan.problem}\n(factlab plan {nb.stem} --params {params} --gpus {args.gpus} "
                  f"--gpu-mem {args.gpu_mem:g} prints every term)", file=sys.stderr)
            return 1
        rewards += f"; fits {args.gpus} x {args.gpu_mem:g} GB with {plan.strategy.name}"
    # redacted as config.yaml is: a model name may be a URL with a password (issue 43 round-4 probe)
    print(redact_text(f"ok: {params} is a valid {type(cfg).__name__} for {nb.stem} (model {cfg.model.name}; "
                      f"rewards: {rewards})"))
    return 0


def _cmd_plan(args) -> int:
    nb = find_notebook(args.notebook)
    params = Path(args.params) if args.params else default_params(nb, args.smoke)
    cfg = load_params(nb.stem, params)
    try:
        plan = _plan(args, nb, cfg)
    except PlanError as e:
        print(f"error: {params}: {e}", file=sys.stderr)
        return 2
    print(f"{params}\n{plan.describe()}")
    return 0 if plan.fits else 1


def _cmd_rewards(args) -> int:
    for name in available_rewards():
        print(name)
    return 0


def _cmd_run_all(args) -> int:
    _out_folder(args.out)
    _verify_on_every_load(args)
    try:
        with _sigterm_as_interrupt():
            results = run_all(smoke=not args.full, out=args.out, only=args.only, with_code=args.with_code,
                              jobs=args.jobs)
    except KeyboardInterrupt:
        print("interrupted (each run folder's manifest.json says so); see the --resume lines above", file=sys.stderr)
        return 130
    failed = [r for r in results if not r.ok]
    for r in results:
        print(f"{'ok    ' if r.ok else 'FAILED'} {r.report}" + (f"  ({r.error})" if r.error else ""))
    if not results:
        print("no notebooks found", file=sys.stderr)
        return 1
    return 1 if failed else 0


def _cmd_world(args) -> int:
    paths = build_world(args.out or default_world_dir())
    for k, v in paths.items():
        print(f"{k:12s} {v}")
    return 0


def _cmd_index_build(args) -> int:
    kw = {} if args.shard_tokens is None else {"shard_tokens": args.shard_tokens}
    try:
        index = CorpusIndex.build(args.corpus, args.tokenizer, args.out, text_field=args.text_field,
                                  cpus=args.cpus, **kw)
    except OSError as e:  # an unknown tokenizer, an unreadable corpus, an occupied --out
        print(f"error: {_os_error(e)}", file=sys.stderr)
        return 2
    except RuntimeError as e:  # a failed build
        print(f"error: {e}", file=sys.stderr)
        return 2
    m = index.meta
    print(f"index:  {index.path}\n"
          f"docs:   {m['n_docs']}  tokens: {m['n_tokens']}  shards: {len(m['shards'])}  ({m['token_dtype']})\n"
          f"built in {m['build_seconds']:.1f} s")
    return 0


def _cmd_index_verify(args) -> int:
    index = CorpusIndex.load(args.dir, verify=True)  # IntegrityError (a ValueError): exit 2 naming the file
    print(f"ok: {index.path}: {len(index.meta['shards'])} shard(s), every file matches its size and SHA-256")
    return 0


def _cmd_serve(args) -> int:
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger(__name__).warning("serving on %s without authentication: anyone who can reach this port "
                                            "can use the model", args.host)
    server = JudgeServer(args.model, host=args.host, port=args.port, max_batch=args.max_batch, dtype=args.dtype,
                         device=args.device)
    print(f"serving {args.model} at {server.url} (judge: {{backend: openai, base_url: {server.url}, "
          f"model: {args.model}}}); Ctrl-C stops", flush=True)
    server.serve_forever()
    return 0


def _cmd_bench(args) -> int:
    scripts = sorted((project_root() / "bench").glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if any(o in s.stem for o in args.only)]
    if not scripts:
        print("no bench/bench_*.py scripts found", file=sys.stderr)
        return 1
    rc = 0
    for script in scripts:
        print(f"== {script.name}", flush=True)
        rc |= subprocess.call([sys.executable, str(script)], cwd=Path(script).parent.parent)
    return rc


def _add_notebook_params(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("notebook", help="notebook path or stem, e.g. 01_corver")
    parser.add_argument("--params", help="params YAML (default: params/<stem>.yaml, or _smoke with --smoke)")
    parser.add_argument("--smoke", action="store_true", help=f"{verb} params/<stem>_smoke.yaml")


def _add_strategy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strategy", help="ddp, zero2, zero3, zero3_offload, fsdp2, single or an accelerate YAML "
                                           "(default: the first that fits)")


def _add_verify(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--verify", action="store_true",
                        help="checksum every index and datastore file on every load, not only the first time")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per judge request: noise, and the URL
    p = argparse.ArgumentParser(prog="factlab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", metavar="N", default=None,
                   help="torch intra-op threads here and in every kernel / worker started (default: "
                        "$FACTLAB_THREADS, else one per core); see factlab.threads")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="execute one notebook into a run folder")
    r.add_argument("notebook", help="notebook path or stem, e.g. 00_quickstart")
    r.add_argument("--params", help="params YAML (default: params/<stem>.yaml, or _smoke with --smoke)")
    r.add_argument("--out", help="runs folder (default: outputs/runs)")
    r.add_argument("--smoke", action="store_true", help="use params/<stem>_smoke.yaml")
    r.add_argument("--with-code", action="store_true", help="keep the code cells in report.html")
    r.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run that did not finish (interrupted or failed) in its own folder, "
                        "with its config.yaml, finished stages and last training checkpoint")
    r.add_argument("--force", action="store_true",
                   help="with --resume: continue even though config.yaml changed since the last attempt "
                        "(each attempt's config is kept in manifest.json)")
    _add_verify(r)
    r.set_defaults(func=_cmd_run)

    c = sub.add_parser("check", help="validate a notebook's params without running anything")
    _add_notebook_params(c, "check")
    c.add_argument("--gpu-mem", type=_positive_float, metavar="GB",
                   help="also refuse params whose memory plan (factlab plan) does not fit GPUs of this size")
    c.add_argument("--gpus", type=_positive_int, default=1, help="GPUs (ranks) for --gpu-mem (default: 1)")
    _add_strategy(c)
    pl = sub.add_parser("plan", help="print the GPU memory plan of a notebook's params, per rank and stage")
    _add_notebook_params(pl, "plan")
    pl.add_argument("--gpus", type=_positive_int, default=1, help="GPUs, one rank each (default: 1)")
    pl.add_argument("--gpu-mem", type=_positive_float, default=80.0, metavar="GB", help="memory a GPU (default: 80)")
    _add_strategy(pl)
    pl.set_defaults(func=_cmd_plan)
    c.set_defaults(func=_cmd_check)

    rw = sub.add_parser("rewards", help="list the registered reward names")
    rw.set_defaults(func=_cmd_rewards)

    a = sub.add_parser("run-all", help="execute every notebook (smoke params unless --full)")
    a.add_argument("--full", action="store_true", help="full-scale params (GPU)")
    a.add_argument("--out", help="runs folder (default: outputs/runs)")
    a.add_argument("--only", nargs="+", metavar="NOTEBOOK", help="notebook stems to run (at least one)")
    a.add_argument("--with-code", action="store_true", help="keep the code cells in every report.html")
    a.add_argument("--jobs", type=int, metavar="N", default=None,
                   help="notebooks at once, each kernel on cores / N threads (default: one per core, as memory "
                        "allows; 1: one after another)")
    _add_verify(a)
    a.set_defaults(func=_cmd_run_all)

    w = sub.add_parser("world", help="build the countryinfo mini-world files")
    w.add_argument("--out", help="output folder (default: the user cache)")
    w.set_defaults(func=_cmd_world)

    ix = sub.add_parser("index", help="corpus indexes (infini-gram)")
    ix_sub = ix.add_subparsers(dest="index_cmd", required=True)
    ib = ix_sub.add_parser("build", help="tokenize a JSONL corpus and build an infini-gram index")
    ib.add_argument("corpus", help="JSONL file, one document per line")
    ib.add_argument("--tokenizer", required=True,
                    help="HF tokenizer id or local path (or smollm2-135m-instruct, the embedded default)")
    ib.add_argument("--out", required=True, help="index folder (an existing index there is replaced)")
    ib.add_argument("--text-field", default="text", help="JSON field holding the text (default: text)")
    ib.add_argument("--shard-tokens", type=_positive_int, default=None,
                    help="start a new shard after this many tokens (default: 500,000,000)")
    ib.add_argument("--cpus", type=_positive_int, default=None, help="suffix-array jobs (default: all cores)")
    ib.set_defaults(func=_cmd_index_build)
    iv = ix_sub.add_parser("verify", help="check every file of an index against its manifest (sizes and SHA-256)")
    iv.add_argument("dir", help="index folder")
    iv.set_defaults(func=_cmd_index_verify)

    add_sweep_command(sub)  # factlab sweep NOTEBOOK --grid KEY=V1,V2 ... (factlab.sweep)
    add_train_command(sub)  # factlab train NOTEBOOK --accelerate-config NAME ... (factlab.launch)

    sv = sub.add_parser("serve", help="serve a local model as an OpenAI-compatible judge endpoint (factlab.serve)")
    sv.add_argument("--model", default="smollm2-135m-instruct", help="factlab model name, HF id or local path")
    sv.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    sv.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    sv.add_argument("--max-batch", type=_positive_int, default=16, help="requests answered in one generation")
    sv.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    sv.add_argument("--device", default="auto")
    sv.set_defaults(func=_cmd_serve)

    ev = sub.add_parser("evidence", help="run the pre-registered hypotheses and write results/ (factlab.evidence)")
    ev.add_argument("names", nargs="*", help=f"hypotheses to run ({', '.join(HYPOTHESES)}); default: every evidence one (not smoke_*)")
    ev.add_argument("--out", help="runs folder (default: outputs/evidence)")
    ev.add_argument("--recompute", action="store_true",
                    help="rebuild the effects and results/README.md from the committed rows (results/NAME/rows.jsonl.gz); "
                         "no training")
    ev.add_argument("--pilot", action="store_true",
                    help="the base alone on the hypothesis' held-out rows, then the minimum detectable effect at 80%% "
                         "power for several seed counts (results/NAME/power.json); no arm trains")
    ev.add_argument("--resume", metavar="RUN_DIR",
                    help="continue the interrupted run folder of the one hypothesis named (finished arms and seeds "
                         "are read back), then write results/ as a new run would")
    ev.set_defaults(func=_cmd_evidence)

    b = sub.add_parser("bench", help="run the bench/bench_*.py scripts (each prints its ratios last)")
    b.add_argument("only", nargs="*", help="substrings of script names to run")
    b.set_defaults(func=_cmd_bench)

    args = p.parse_args(argv)
    try:
        threads.configure(args.threads)
        return args.func(args)
    except OSError as e:  # a user path that is missing, a folder, a file, unreadable, ...
        print(f"error: {_os_error(e)}", file=sys.stderr)
        return 2
    except ValueError as e:  # ConfigError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
