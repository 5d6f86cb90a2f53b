"""Recipes: one module per paper (and one for the comparison), each the paper in one place.

A recipe holds the paper's params class and its stages as functions; the notebook calls them
cell by cell and ``factlab train`` (``factlab.launch``) calls the same ones in every launched
process. Each module opens with an index from the paper's sections (``../shared/papers/``) to
its functions. The library below (``rewards``, ``synth``, ``eval``, ``train``: the engine)
knows nothing of recipes; ``runner``, ``launch``, ``evidence`` and ``cli`` sit above them.

=================  =========================  =================================================
notebook           recipe                     paper
=================  =========================  =================================================
01_corver          ``recipes.corver``         000_ac66a963fabf3916.txt (CorVer)
02_binary_rar      ``recipes.rar``            001_f9c1f8134c3dd554.txt (Binary RAR)
03_seva            ``recipes.seva``           002_56f1a732f42030d3.txt (SEVA)
04_k2v             ``recipes.k2v``            003_5e9813e66e6ba19a.txt (K2V)
05_klcf            ``recipes.klcf``           004_4f2ca2d982459bb2.txt (KLCF)
06_compare         ``recipes.compare``        every reward family under one budget
=================  =========================  =================================================

Every recipe module ends with ``RECIPE``, a ``recipes.stages.Recipe`` (the contract, written
down): ``notebook``, ``config`` (the params class), ``what`` (one line: what it trains),
``start(cfg)`` (the warm start), ``prepare(cfg, resources, run_dir)`` (the training input),
``prepare_alone(cfg)`` (whether ``prepare`` trains and so runs in its own process first) and
``train(cfg, inputs, resources, run_dir) -> dict[str, TrainResult]``. The shared helpers:
``warmstart`` (SFT before RL), ``selffilter`` (CorVer's learning zone, also a generic data
filter), ``evidence`` (the evidence cells' arms).
"""

from __future__ import annotations

from . import compare, corver, k2v, klcf, rar, seva
from .stages import Recipe

__all__ = ["RECIPES", "Recipe", "recipe", "compare", "corver", "k2v", "klcf", "rar", "seva"]

# notebook stem -> its recipe
RECIPES: dict[str, Recipe] = {m.RECIPE.notebook: m.RECIPE for m in (corver, rar, seva, k2v, klcf, compare)}


def recipe(notebook: str) -> Recipe:
    """The recipe of a notebook stem (``01_corver`` -> ``recipes.corver.RECIPE``); ``KeyError``
    naming the known stems otherwise."""
    try:
        return RECIPES[notebook]
    except KeyError:
        raise KeyError(f"no recipe for notebook {notebook!r}; recipes: {', '.join(sorted(RECIPES))}") from None
