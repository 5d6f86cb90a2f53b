"""The cache's locks: two processes (notebooks, test workers) that want the same cached folder
build it once, and neither reads it half-built."""

import multiprocessing
import threading
import time
from pathlib import Path

from factlab import paths
from factlab.corpus import retrieval as R
from factlab.data.miniworld import ensure_world


def test_build_lock_makes_a_second_holder_wait_for_the_first(tmp_path):
    # flock locks belong to open file descriptions, so two threads contend as two processes do
    folder, events, inside = tmp_path / "index", [], threading.Event()

    def first():
        with paths.build_lock(folder):
            inside.set()
            time.sleep(0.3)
            events.append("first leaves")

    def second():
        inside.wait()
        with paths.build_lock(folder):
            events.append("second enters")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert events == ["first leaves", "second enters"]
    assert (tmp_path / "index.lock").is_file() and not folder.exists()  # the lock sits beside the folder


def _datastore_in_child(folder: str, corpus: str, log: str) -> None:
    build = R.Datastore.from_jsonl

    def counted(*args, **kwargs):
        with open(log, "a") as fh:
            fh.write("built\n")
        time.sleep(0.5)  # widen the window in which an unlocked second caller would build too
        return build(*args, **kwargs)

    R.Datastore.from_jsonl = counted
    ds = R.ensure_datastore(R.DatastoreSection(dir=folder), corpus, "smollm2-135m-instruct", 128)
    with open(log, "a") as fh:
        fh.write(f"loaded {len(ds)}\n")


def test_two_processes_sharing_a_cache_build_one_datastore_and_both_load_it(tmp_path):
    R.load_tokenizer("smollm2-135m-instruct")  # converted once here, not in both children
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(line for i, line in enumerate(open(ensure_world()["corpus"])) if i < 40))
    log = tmp_path / "calls.log"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_datastore_in_child, args=(str(tmp_path / "datastore"), str(corpus), str(log)))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    lines = Path(log).read_text().split("\n")
    assert lines.count("built") == 1
    loaded = [line for line in lines if line.startswith("loaded")]
    assert len(loaded) == 2 and loaded[0] == loaded[1] and loaded[0] != "loaded 0"
