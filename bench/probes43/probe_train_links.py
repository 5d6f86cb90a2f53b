# issue 43 round-3c probe: `factlab train --run-dir D` where D holds a symbolic link (launch.json, the
# train/ folder) planted by whoever shares the folder: does training write through it? (`factlab run`
# refuses any link in its run folder; `factlab train` writes config.yaml, launch.json and checkpoints.)
import os, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *

for planted in ("launch.json", "train"):
    run_dir = T / f"run-{planted}"
    run_dir.mkdir()
    victim = T / f"victim-{planted}"
    if planted == "train":
        victim.mkdir()
    else:
        victim.write_text("precious\n")
    (run_dir / planted).symlink_to(victim)
    rc, out = cli("train", "02_binary_rar", "--smoke", "--accelerate-config", "ddp", "--num-processes", "1",
                  "--run-dir", run_dir, timeout=900, env={"FACTLAB_THREADS": "1"})
    wrote = any(victim.iterdir()) if victim.is_dir() else victim.read_text() != "precious\n"
    record("security hole" if wrote else "clear error" if rc == 2 and "symbolic link" in out else "unclear error",
           f"factlab train --run-dir D with D/{planted} a link elsewhere",
           f"exit {rc}; written through: {wrote}; {out.strip().splitlines()[-1][:200] if out.strip() else ''}")
