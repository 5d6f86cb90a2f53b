# issue 43 round-3c probe: results/ is committed, so a clone can carry symbolic links there. Does
# `factlab evidence` (its writers: rows, effects, command.txt, manifest, runtime, figures, README.md) write
# through a link planted in results/ or results/<name>/? One line per probe: CLASS | probe | detail.
import os, shutil, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab import evidence

NAME = "organism_binary_rar"


def project() -> Path:
    """A copy of the project's results/ (and the params evidence reads) in a scratch root."""
    root = T / "proj"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "params", root / "params")
    shutil.copytree(ROOT / "results", root / "results")
    return root


def planted(rel: str, call):
    root = project() if not (T / "proj").exists() else T / "proj"
    victim = T / "victim.txt"
    victim.write_text("precious\n")
    link = root / "results" / rel
    if link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(victim)
    try:
        call(root)
        outcome = "returned"
    except Exception as e:
        outcome = f"{type(e).__name__}: {str(e)[:160]}"
    lost = victim.read_bytes() != b"precious\n"
    record("security hole" if lost else "works as documented" if "symbolic link" in outcome else "clear error",
           f"results/{rel} a link to a file elsewhere", f"victim {'overwritten' if lost else 'untouched'}; {outcome}")
    if link.is_symlink():
        link.unlink()


recompute = lambda root: evidence.recompute([NAME], root=root, replicates=50)
write_rows = lambda root: evidence.write_rows(root / "results" / NAME, evidence.read_rows(ROOT / "results" / NAME))
planted("README.md", recompute)
planted(f"{NAME}/rows.jsonl.gz.tmp", write_rows)
planted(f"{NAME}/command.txt", lambda root: evidence._write_hypothesis(
    root / "results" / NAME, {"command": "x", "params": "p", "hypothesis": NAME}, {}, root))
