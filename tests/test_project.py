"""The project's promises to a new user: set-up files agree with each other."""

import json
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req.strip(), maxsplit=1)[0].lower()


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(d): d for d in py["dependencies"] + py["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = {_name(d): d for d in pip if not d.startswith("-e")}
    assert set(listed) == set(wanted)
    for name, spec in wanted.items():
        if name != "torch":  # environment.yml pins the CPU wheel, pyproject keeps a range
            assert listed[name] == spec, name
    assert "torch==2.13.0" in pip
    assert any(d.startswith("-e .") for d in pip)


def test_torch_range_admits_the_cpu_wheel():
    from packaging.specifiers import SpecifierSet

    py = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = next(d for d in py["dependencies"] if _name(d) == "torch")
    assert "2.13.0" in SpecifierSet(torch[len("torch"):])


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci/run").read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, re.S)
    assert len(blocks) >= 1
    first = [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.split("#")[0].strip()]
    assert first[:2] == ["make run", "make test"], "README must open with the two commands"
    # the one step allowed before it: installing headless Chromium, best effort, for the report test
    chromium = re.search(r"^if .*chromium.*\n(?:  .*\n)+fi\n", ci, re.M)
    assert chromium and "apt-get install -y chromium" in chromium.group(0) and "|| echo" in chromium.group(0)
    ci_cmds = [line.strip() for line in ci.replace(chromium.group(0), "").splitlines()
               if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci_cmds == ["make test"]


def test_notebooks_are_parameterized_and_stripped():
    nbs = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert nbs
    for nb_path in nbs:
        nb = json.loads(nb_path.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{nb_path.name}: exactly one 'parameters' cell"
        src = "".join(tagged[0]["source"])
        assert "params_file" in src and "run_dir" in src, nb_path.name
        for c in code:
            assert not c.get("outputs"), f"{nb_path.name}: committed with outputs"
            assert c.get("execution_count") is None, nb_path.name


def test_outputs_is_ignored_except_readme():
    ignore = (ROOT / ".gitignore").read_text().splitlines()
    assert "outputs/*" in ignore and "!outputs/README.md" in ignore
