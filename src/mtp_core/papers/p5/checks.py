"""Paper 5's config checks (`papers.p5.checks.check`, run before any job): the cross-references and settings the
JSON schema (`p5.schema.yaml`) cannot express, read through `papers.p5.plan`.
"""

from __future__ import annotations

from ...config.settings import ConfigError
from ...decoding.catalog import check_decoder, decoder_names
from ...decoding.tree import published_trees
from ...io import InputError
from .frontier import search_stop
from .plan import (
    FIGURES,
    HEADS_MODULE_KEYS,
    HEADS_SOURCES,
    HUMANEVAL_PROBLEMS,
    TABLES,
    figure_spec,
    frontier_job_settings,
    frontier_settings,
    heads_names,
    heads_source,
    heads_spec,
    launcher_settings,
    methods,
    model,
    search_heads,
    section,
    table_spec,
    tasks,
)
from .scheduler import POLICIES, feature_depth
from .settings import FrontierSettings, HeadsTrainConfig, rows_needed
from .splits import PROMPT_FORMATS, SOURCES, SPLITS


def _need(table: dict, name: str, key: str, kind: str) -> None:
    if name not in table:
        raise ConfigError(f"{key}: {kind} {name!r} is not declared (declared: {', '.join(table) or 'none'})")


def check(config: dict) -> None:
    """Cross-references and settings JSON schema cannot express (raises ConfigError naming the key): the model and
    math datasets are declared; splits fit their pools (HumanEval: 164 problems; more would overlap) and no two
    tasks share a pool; trained heads' training settings build with their launcher; heads predict at least as deep
    as the searched depths, the published default tree and the score feature; methods name registered decoders
    with known parameters, declared heads, published trees, and EntMTP's heads are searched; τ_off <= τ_on;
    budgets give non-empty windows; the verification prices reach the widest tree the search grows or prices
    (`settings.rows_needed`: int(max budget x (1 + tolerance)) nodes, the default tree's, plus the root row);
    tables, figures and the leaderboard name declared tasks and methods (the rows' heads' model:
    `leaderboard.plan.check`). The frontier's engine needs no check: it follows the decoding regime
    (`plan.search_engine`), so a bank is never chosen in another regime than its decoders'."""
    from ...train.launch.settings import check_training

    s = section(config)
    _need(config["models"], model(config), "papers.p5.model", "model")
    if s.get("prompt_format", "chat") not in PROMPT_FORMATS:
        raise ConfigError(f"papers.p5.prompt_format: one of {', '.join(PROMPT_FORMATS)}")
    pools: dict[tuple, str] = {}
    for t, spec in tasks(config).items():
        key = f"papers.p5.tasks.{t}"
        if spec["source"] not in SOURCES:
            raise ConfigError(f"{key}.source: {spec['source']!r} is not one of {', '.join(SOURCES)}")
        pool = (spec["source"], spec.get("dataset"))
        if pool in pools:
            raise ConfigError(f"{key}: draws from the same prompts as task {pools[pool]!r}: their splits would overlap")
        pools[pool] = t
        if spec["source"] == "math":
            _need(config["datasets"], spec.get("dataset"), f"{key}.dataset", "dataset")
            if config["datasets"][spec["dataset"]]["kind"] not in ("synthetic_math", "metamathqa"):
                raise ConfigError(f"{key}.dataset: {spec['dataset']!r} is not a math dataset")
        if spec["source"] == "humaneval" and sum(int(spec[x]) for x in SPLITS) > HUMANEVAL_PROBLEMS:
            raise ConfigError(
                f"{key}: test + calib + train = {sum(int(spec[x]) for x in SPLITS)} prompts exceed HumanEval's "
                f"{HUMANEVAL_PROBLEMS} problems: the splits would overlap"
            )
    fs = _frontier_settings(config)
    deepest = max(fs.depths)
    tree_depths = {n: max(len(p) for p in t) for n, t in published_trees().items()}
    for h in heads_names(config):
        key = f"papers.p5.heads.{h}"
        spec = heads_spec(config, h)
        src = heads_source(config, h)
        if src not in HEADS_SOURCES:
            raise ConfigError(f"{key}.source: {src!r} is not one of {', '.join(HEADS_SOURCES)}")
        if src == "train":
            try:
                HeadsTrainConfig.from_dict({k: spec[k] for k in HEADS_MODULE_KEYS if k in spec})
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{key}: {e}") from None
            check_training(key, {**(spec.get("train") or {}), "final_dir": "heads"}, launcher_settings(config, h))
        elif "id" not in spec and "path" not in spec:
            raise ConfigError(f"{key}: source {src} needs `id` (hub) or `path` (local)")
        k = int(spec.get("num_heads", 4))
        if h in search_heads(config):
            if k < deepest:
                raise ConfigError(f"{key}.num_heads: {k} heads, fewer than the search depth {deepest} (search.depths)")
            if feature_depth(fs.score_feature) > k:
                raise ConfigError(f"papers.p5.scheduler.score_feature: {fs.score_feature} reads more than {k} heads")
    for i, h in enumerate(search_heads(config)):
        _need(section(config).get("heads") or {}, h, f"papers.p5.search.heads[{i}]", "heads")
    if fs.default_tree not in tree_depths:
        raise ConfigError(f"papers.p5.search.default_tree: no published tree {fs.default_tree!r}")
    for b in fs.budgets:
        lo, hi = int(b * (1 - fs.tolerance)), int(b * (1 + fs.tolerance))
        if hi < 2 or hi < lo:  # searched trees have 2 nodes or more (the 1-node start is not a row)
            raise ConfigError(
                f"papers.p5.search.budgets: budget {b} with tolerance {fs.tolerance} has no window "
                f"([{lo}, {hi}] holds no searched tree: they have 2 nodes or more)"
            )
    default_nodes = len(published_trees()[fs.default_tree])
    need, max_rows = rows_needed(fs.budgets, fs.tolerance, [default_nodes]), frontier_job_settings(config)["max_rows"]
    if max_rows < need:
        raise ConfigError(
            f"papers.p5.throughput.max_rows: {max_rows} rows priced, but the search grows trees to "
            f"{search_stop(fs.budgets, fs.tolerance)} nodes (int(max budget x (1 + tolerance))) and the default "
            f"tree {fs.default_tree} has {default_nodes}: their verification needs {need} rows (set max_rows >= {need})"
        )
    for label, m in methods(config).items():
        key = f"papers.p5.methods.{label}"
        if m["decoder"] not in decoder_names():
            raise ConfigError(f"{key}.decoder: decoder {m['decoder']!r} is not registered")
        if "heads" in m:
            _need(section(config).get("heads") or {}, m["heads"], f"{key}.heads", "heads")
        tree = m.get("tree")
        if isinstance(tree, str):
            if tree not in tree_depths:
                raise ConfigError(f"{key}.tree: no published tree {tree!r} ({', '.join(sorted(tree_depths))})")
            k = int(heads_spec(config, m["heads"]).get("num_heads", 4)) if "heads" in m else 0
            if tree_depths[tree] > k:
                raise ConfigError(f"{key}: tree {tree} is {tree_depths[tree]} deep, heads {m['heads']!r} predict {k}")
        if m["decoder"] == "entmtp":
            if m.get("heads") not in search_heads(config):
                raise ConfigError(f"{key}.heads: EntMTP reads the bank of searched heads (papers.p5.search.heads)")
            if m.get("policy", "binary_tau") not in POLICIES:
                raise ConfigError(f"{key}.policy: one of {', '.join(POLICIES)}")
            on, off = m.get("tau_on", m.get("tau")), m.get("tau_off", m.get("tau"))
            if on is not None and off is not None and float(off) > float(on):
                raise ConfigError(f"{key}: tau_off {off} > tau_on {on} (the hysteresis needs tau_off <= tau_on)")
        try:
            check_decoder(label, {k: v for k, v in m.items() if k != "title"})
        except InputError as e:
            raise ConfigError(f"{key}: {e}") from None
    if any(f > 1 for f in fs.hysteresis):
        raise ConfigError("papers.p5.scheduler.hysteresis: factors > 1 would make tau_off > tau_on")
    for name in TABLES:
        spec = table_spec(config, name)
        for i, t in enumerate(spec["tasks"]):
            _need(tasks(config), t, f"papers.p5.tables.{name}.tasks[{i}]", "task")
        for i, m in enumerate(spec.get("methods") or []):
            _need(methods(config), m, f"papers.p5.tables.{name}.methods[{i}]", "method")
    for name in FIGURES:
        spec = figure_spec(config, name)
        for i, t in enumerate(spec.get("tasks") or [spec.get("task")]):
            _need(tasks(config), t, f"papers.p5.figures.{name}.task" + (f"s[{i}]" if "tasks" in spec else ""), "task")
    lb = s.get("leaderboard") or {}
    if lb.get("methods"):
        _need(tasks(config), lb.get("task"), "papers.p5.leaderboard.task", "task")
        for i, m in enumerate(lb["methods"]):
            _need(methods(config), m, f"papers.p5.leaderboard.methods[{i}]", "method")


def _frontier_settings(config: dict) -> FrontierSettings:
    try:
        return frontier_settings(config)
    except ValueError as e:
        raise ConfigError(f"papers.p5: {e}") from None
