"""Paper 3's experiment plan: the validated `papers.p3` section (`P3Settings`) turned into decoding jobs, result
files, tables and figures (paper 3, Section 4). The rules (`workflow/rules/p3.smk`), the tests and the checks read
it; the scripts get what they need as rule params.

* **Methods.** `papers.p3.methods.<label>` = a registered decoder (`decoder`) with fixed `params`, the decoder
  parameter that receives the block complexity (`bc_param`, plus `bc_offset`: prompt lookup's chain of
  `num_draft = BC - 1` drafts fills BC rows with its root) and per-BC overrides (`by_bc`, e.g. the paper's two
  masks at BC 60, Section 4). Baselines (prompt lookup, lookahead, STAND) and probing variants alike.
* **Settings.** A method at block complexity BC is the setting `<method>-bc<BC>`; every decoding job also runs
  greedy, `<method>-greedy`, the reference of its speed ratio and of its lossless check (bench protocol).
* **Jobs.** One decoding job per (model, method) some table or figure shows, running greedy and the method at
  every BC any table or figure shows (the same files for every method: one rule), interleaved on the same
  loaded weights (`mtp_core.bench.protocol.run_bench`).
* **Result files**: `results/decode/p3/<model>/prompts-<prompt set>/<setting>.json` (+ `.samples.jsonl`).
* **Tables** (`tables.<name>`: `methods`, `bcs`, optional `models`): `table1` (methods x BC x model, Table 1),
  `table2` (dynamic vs fixed branching, one vs two masks, Table 2), `pruning` (the tree-pruning ablation,
  Section 3.5 / App. G.5), `strategies` (mask-embedding initialisations, Section 3.1). **Figures**: `fig4`,
  `fig5` (per-category accepted length by BC for one model, Figs. 4-5), `fig2` (mask vs next-token hidden-state
  alignment per layer, Section 3.2; analysis per model).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

from ...config import layout
from ...config.plan import PaperPlan
from ...config.registry import LeaderboardEntry
from ...config.settings import ConfigError
from ...decoding.catalog import check_decoder, decoder_names
from ...io import InputError
from .settings import STRATEGIES

REFERENCE = "greedy"
TABLES = ("table1", "table2", "pruning", "strategies")
CATEGORY_FIGURES = ("fig4", "fig5")
ALIGNMENT_FIGURE = "fig2"
FIGURES = (ALIGNMENT_FIGURE, *CATEGORY_FIGURES)
EXPERIMENTS = (*TABLES, *CATEGORY_FIGURES)  # the tables and figures that read decoding results


@dataclass(frozen=True)
class Method:
    decoder: str
    title: str | None
    params: dict[str, Any]
    bc_param: str | None
    bc_offset: int
    by_bc: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Table:
    methods: list[str]
    bcs: list[int]
    models: list[str] | None  # null: every model of `papers.p3.models`


@dataclass(frozen=True)
class CategoryFigure:
    model: str
    methods: list[str]
    bcs: list[int]


@dataclass(frozen=True)
class Alignment:
    model: str
    probing: dict[str, Any]
    topk: int
    per_category: int | None
    max_new_tokens: int | None


@dataclass(frozen=True)
class Figures:
    fig2: Alignment
    fig4: CategoryFigure
    fig5: CategoryFigure


@dataclass(frozen=True)
class Leaderboard:
    bc: int
    methods: list[str]


@dataclass(frozen=True)
class P3Settings:
    """`papers.p3` (workflow/schemas/p3.schema.yaml, which holds every default)."""

    enabled: bool
    models: list[str]
    prompt_set: str
    per_category: int | None
    max_new_tokens: int
    bc_accounting: str
    batch_size: int
    bench: dict[str, int]
    methods: dict[str, Method]
    tables: dict[str, Table]
    figures: Figures
    leaderboard: Leaderboard
    in_all: list[str] | None


def setting_label(method: str, bc: int | None) -> str:
    """`<method>-bc<BC>`, or `<method>-greedy` for the job's greedy reference (bc None)."""
    return f"{method}-{REFERENCE}" if bc is None else f"{method}-bc{int(bc)}"


@dataclass(frozen=True)
class DecodeJob:
    """One decoding job: greedy and one method at its BCs on one model, side by side."""

    model: str
    method: str
    bcs: tuple[int, ...]


class P3Plan(PaperPlan):
    paper = "p3"
    Settings = P3Settings
    TABLES = TABLES
    FIGURES = FIGURES

    # ------------------------------------------------------------------------------------------- methods

    def method_title(self, method: str) -> str:
        return self.s.methods[method].title or method

    def setting_params(self, method: str, bc: int) -> dict[str, Any]:
        """Decoder parameters (with `decoder`, the registry name) of `method` at block complexity `bc`: the
        parameter `bc_param` receives the rows BC allows under `bc_accounting` (§3.3 `rows`: every input row of
        a verification forward; §4 `nodes`: draft nodes only, a method then runs BC + 1 rows, times 1 + masks
        per node for probing), plus `bc_offset`."""
        m = self.s.methods[method]
        params: dict[str, Any] = {"decoder": m.decoder, **copy.deepcopy(m.params)}
        params.update(copy.deepcopy(m.by_bc.get(str(int(bc))) or {}))
        if m.bc_param:
            rows = int(bc)
            if self.s.bc_accounting == "nodes":
                masks = int(params.get("masks_per_step", 1)) if m.decoder == "probing" else 0
                rows = (int(bc) + 1) * (1 + masks)
            params[m.bc_param] = rows + m.bc_offset
        return params

    # --------------------------------------------------------------------------------------- experiments

    def experiment(self, name: str) -> Table | CategoryFigure:
        return self.s.tables[name] if name in TABLES else getattr(self.s.figures, name)

    def experiment_models(self, name: str) -> list[str]:
        """Models an experiment shows: a figure's `model`, a table's `models` (default: `papers.p3.models`)."""
        spec = self.experiment(name)
        return list(spec.models or self.s.models) if isinstance(spec, Table) else [spec.model]

    def block_complexities(self) -> list[int]:
        """Every BC some table or figure shows, ascending: each decoding job runs its method at all of them, so
        that one rule (`p3_decode`, one Slurm resource entry) has the same outputs for every method."""
        return sorted({int(b) for name in EXPERIMENTS for b in self.experiment(name).bcs})

    def decode_jobs(self) -> list[DecodeJob]:
        """Every (model, method) job any table or figure reads, in the declared order of models and methods."""
        shown = {(model, method) for n in EXPERIMENTS for model in self.experiment_models(n) for method in
                 self.experiment(n).methods}  # fmt: skip
        bcs = tuple(self.block_complexities())
        return [DecodeJob(mo, me, bcs) for mo in self.s.models for me in self.s.methods if (mo, me) in shown]

    def decode_methods(self) -> list[str]:
        """Methods with a decoding job (on some model)."""
        return list(dict.fromkeys(j.method for j in self.decode_jobs()))

    def job_decoders(self, model: str, method: str) -> dict[str, dict]:
        """Bench label -> decoder parameters of one job: the greedy reference first (label `greedy`, which the
        bench protocol compares speed and tokens with), then the method at its BCs ascending (setting labels)."""
        job = next((j for j in self.decode_jobs() if (j.model, j.method) == (model, method)), None)
        if job is None:
            raise ConfigError(f"papers.p3: no table or figure shows method {method!r} on model {model!r}")
        return {REFERENCE: {}} | {setting_label(method, bc): self.setting_params(method, bc) for bc in job.bcs}

    def result(self, model: str, setting: str) -> str:
        return self.result_path(model, layout.prompts_task(self.s.prompt_set), setting)

    def decode_outputs(self, model: str = "{model}", method: str = "{method}") -> list[str]:
        """Result files of a decoding job (wildcards by default): greedy, then each BC."""
        settings = [None, *self.block_complexities()]
        return [self.result(model, setting_label(method, bc)) for bc in settings]

    def experiment_settings(self, name: str) -> list[dict[str, Any]]:
        """The rows an experiment reads: per (model, method, BC) its result file, the job's greedy reference
        file, the method's title and the decoder parameters (JSON-ready; the table script's `params.settings`)."""
        spec = self.experiment(name)
        return [
            {
                "model": model,
                "method": method,
                "title": self.method_title(method),
                "bc": int(bc),
                "path": self.result(model, setting_label(method, bc)),
                "reference": self.result(model, setting_label(method, None)),
                "params": self.setting_params(method, bc),
            }
            for model in self.experiment_models(name)
            for method in spec.methods
            for bc in spec.bcs
        ]

    def experiment_results(self, name: str) -> list[str]:
        """Result files an experiment reads (settings and their greedy references), without duplicates."""
        rows = self.experiment_settings(name)
        return list(dict.fromkeys(p for r in rows for p in (r["path"], r["reference"])))

    def report_inputs(self, name: str) -> dict[str, str | list[str]]:
        """Figure 2: the alignment analysis of its model; the others: the result files they read."""
        if name == ALIGNMENT_FIGURE:
            return {"csv": self.alignment_csv(self.s.figures.fig2.model)}
        return {"results": self.experiment_results(name)}

    def report_params(self, name: str) -> dict[str, Any]:
        """Figure 2's settings (kind alignment); the others' name and settings (`experiment_settings`; a figure's
        kind: category)."""
        if name == ALIGNMENT_FIGURE:
            return {"kind": "alignment", **self.alignment()}
        spec = {"name": name, "settings": self.experiment_settings(name)}
        return spec if name in TABLES else {"kind": "category", **spec}

    def alignment(self) -> dict[str, Any]:
        """Figure 2's settings (`figures.fig2`), as the alignment job and the figure read them."""
        return asdict(self.s.figures.fig2)

    def alignment_csv(self, model: str = "{model}") -> str:
        return f"{self.analysis_dir(model)}/alignment.csv"

    def leaderboard(self) -> list[LeaderboardEntry]:
        """Each of `leaderboard.methods` at block complexity `bc` as the paper runs it, and guarded by the
        wall-clock guard (`adaptive`: drafts only where they pay on this machine)."""
        bc, rows = self.s.leaderboard.bc, []
        for method in self.s.leaderboard.methods:
            params, title = self.setting_params(method, bc), self.method_title(method)
            rows.append(LeaderboardEntry("p3", f"p3-{method}-bc{bc}", f"P3 {title}, BC {bc}", params))
            rows.append(LeaderboardEntry("p3", f"p3-{method}-bc{bc}-guarded", f"P3 {title}, BC {bc}, guarded",
                                         {**params, "adaptive": True}))  # fmt: skip
        return rows

    # ---------------------------------------------------------------------------------------------- checks

    def check(self) -> None:
        """Models and the prompt set are declared; `by_bc` keys are block complexities; every method names a
        registered decoder whose parameters it accepts at every block complexity (an unknown one is named with
        the accepted ones); tables, figures and the leaderboard name declared methods and models; Figure 2's
        probing settings build a mask embedding (strategy known)."""
        declared = list(self.config["models"])
        self.check_names("models", self.s.models, declared, "model", "`models`")
        self.check_names(
            "prompt_set", self.s.prompt_set, list(self.config["prompt_sets"]), "prompt set", "`prompt_sets`"
        )
        for label, m in self.s.methods.items():
            where = f"papers.p3.methods.{label}"
            for k in m.by_bc:
                if not str(k).isdigit():
                    raise ConfigError(f"{where}.by_bc: key {k!r} is not a block complexity")
            for bc in self.block_complexities():
                try:
                    check_decoder(label, self.setting_params(label, bc))
                except InputError as e:
                    key = "decoder" if m.decoder not in decoder_names() else f"params (at BC {bc})"
                    raise ConfigError(f"{where}.{key}: {e}") from None
        methods = list(self.s.methods)
        for name in EXPERIMENTS:
            kind = "tables" if name in TABLES else "figures"
            spec = self.experiment(name)
            self.check_names(f"{kind}.{name}.methods", spec.methods, methods, "method", "papers.p3.methods")
            shown = ("models", spec.models or []) if isinstance(spec, Table) else ("model", spec.model)
            self.check_names(f"{kind}.{name}.{shown[0]}", shown[1], self.s.models, "model", "papers.p3.models")
        self.check_names("figures.fig2.model", self.s.figures.fig2.model, declared, "model", "`models`")
        strategy = self.s.figures.fig2.probing.get("strategy", "prompt_mean")
        if strategy not in STRATEGIES:
            raise ConfigError(f"papers.p3.figures.fig2.probing.strategy: {strategy!r} is not one of {STRATEGIES}")
        self.check_names("leaderboard.methods", self.s.leaderboard.methods, methods, "method", "papers.p3.methods")
