"""Paper 2's tables, figures and speed experiments, the `Experiments` part of `plan.P2Plan`: what each shows
(`papers.p2.tables`, `papers.p2.figures`), the files it reads, the mains whose references it needs, the rows and
trunks of a speed experiment (Figs 4, 5 and 8, Table 8: one bench, a greedy row per trunk), and the parameters the
report script reads. Runs, mains, settings and result paths: `plan`.
"""

from __future__ import annotations

from typing import Any

from ...config import layout
from ...config.plan import PaperPlan
from ...config.settings import model_spec
from ...models.plan import model_dir, model_inputs
from .settings import SpeedRow

REFERENCE = "greedy"
TABLES = ("table1", "table2", "table3", "table4", "table5", "table6", "table7", "table8")
FIGURES = ("fig3", "fig4", "fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11", "fig12", "fig13", "fig14")
SPEED_EXPERIMENTS = ("fig4", "fig5", "fig8", "table8")  # read a bench of their own rows
ACCEPTANCE_SPEED = ("fig5",)  # ... and the acceptance of their runs (CAR per head)
SEEDED = ("table1", "table7")  # also read the runs' seed replicates (the spread over seeds)
CURVE_FIGURES = ("fig7", "fig10")  # read a run's training curves
BASE_REFERENCES = ("table2", "table5", "table6")  # also read a pretrained base's references (identity, KL)
NOKV = "-nokv"  # the label suffix of rows timed without a KV cache
GREEDY_UNCACHED = "greedy-uncached"  # the greedy reference without a KV cache (`uncached`)
PROTOCOLS = {True: "KV cache", False: "no KV cache (App. D)"}


def setting_label(depth: int) -> str:
    """`h<D>`: decoding with D drafts."""
    return f"h{int(depth)}"


def speed_label(run: str, depth: int) -> str:
    return f"{run}-{setting_label(depth)}"


def _suffix(kv: bool) -> str:
    return "" if kv else NOKV


class Experiments(PaperPlan):
    """A base of `plan.P2Plan`: its tables, figures and speed experiments, over its runs and result files."""

    # ------------------------------------------------------------------------------------------ speed experiments

    def speed_experiments(self) -> list[str]:
        return [n for n in SPEED_EXPERIMENTS if self.configured(n)]

    def speed_protocols(self, experiment: str) -> list[bool]:
        """Whether each decoding protocol a speed experiment times keeps a KV cache (`kv_cache`): true = the decoders'
        own cached decoding; false = App. D's protocol, the paper's ("KV cache is not used during inference": every
        forward runs over the whole sequence, `uncached`)."""
        return list(self.experiment(experiment).kv_cache)

    def speed_rows(self, experiment: str) -> list[dict[str, Any]]:
        """The `mtp-spec` rows of a speed experiment under each of its protocols: {label, run, depth, title, main,
        kv_cache}; Figs 4 and 8: every run at its K; Fig. 5 / Table 8: the listed (run, depth) strategies. The
        baseline row is among them (Fig. 8: the 2B dense MTP K = 1, a trunk of its own beside the MoE runs').
        Labels `<run>-h<D>`, with `-nokv` for the uncached protocol."""
        spec = self.experiment(experiment)
        rows = spec.rows or [SpeedRow(run, None, None) for run in spec.runs or []]
        return [
            {
                "label": speed_label(r.run, d := int(r.depth or self.num_heads(r.run))) + _suffix(kv),
                "run": r.run,
                "depth": d,
                "title": r.title or self.run(r.run).title,
                "main": self.main_of(r.run),
                "kv_cache": kv,
            }
            for kv in self.speed_protocols(experiment)
            for r in rows
        ]

    def speed_mains(self, experiment: str) -> list[str]:
        """The trunks the rows decode with, in row order (runs that trained their trunks each bring their own)."""
        return list(dict.fromkeys(r["main"] for r in self.speed_rows(experiment)))

    def greedy_label(self, experiment: str, main: str, kv: bool = True) -> str:
        """The greedy row of a trunk under a protocol: `greedy` (`greedy-nokv`) for the first trunk, the bench's
        reference, `greedy-<main>` (`greedy-nokv-<main>`) for others."""
        own = "" if main == self.speed_mains(experiment)[0] else f"-{main}"
        return f"{REFERENCE}{_suffix(kv)}{own}"

    def speed_path(self, experiment: str, label: str) -> str:
        return self.result_path("speed", experiment, label)

    def speed_decoders(self, experiment: str) -> dict[str, dict[str, Any]]:
        """Bench label -> decoder parameters, per protocol: a greedy row per trunk (the first is `greedy`; uncached:
        `greedy-uncached`), then `mtp-spec` with each row's heads and depth (uncached: `kv_cache: false`)."""
        out: dict[str, dict[str, Any]] = {}
        rows = self.speed_rows(experiment)
        for kv in self.speed_protocols(experiment):
            for m in self.speed_mains(experiment):
                out[self.greedy_label(experiment, m, kv)] = {"decoder": REFERENCE if kv else GREEDY_UNCACHED}
            for r in (r for r in rows if r["kv_cache"] == kv):
                params = {"decoder": "mtp-spec", "heads": self.heads_path(r["run"]), "num_drafts": r["depth"]}
                out[r["label"]] = params if kv else {**params, "kv_cache": False}
        return out

    def speed_trunks(self, experiment: str) -> dict[str, str]:
        """Bench label -> the trunk it decodes with."""
        mains, protocols = self.speed_mains(experiment), self.speed_protocols(experiment)
        out = {self.greedy_label(experiment, m, kv): m for kv in protocols for m in mains}
        return out | {r["label"]: r["main"] for r in self.speed_rows(experiment)}

    def speed_refs(self, experiment: str) -> dict[str, dict[str, Any]]:
        """Bench label (`speed_decoders`' order) -> {greedy: the greedy row of its trunk and protocol, baseline: the
        baseline row of its protocol, kv_cache}: what its speedups are relative to (a protocol is only compared with
        itself)."""
        out = {}
        for kv in self.speed_protocols(experiment):
            base = self.speed_baseline(experiment, kv)
            greedy = [(self.greedy_label(experiment, m, kv), m) for m in self.speed_mains(experiment)]
            rows = [(r["label"], r["main"]) for r in self.speed_rows(experiment) if r["kv_cache"] == kv]
            for label, main in greedy + rows:
                out[label] = {"greedy": self.greedy_label(experiment, main, kv), "baseline": base, "kv_cache": kv}
        return out

    def speed_outputs(self, experiment: str) -> list[str]:
        return [self.speed_path(experiment, label) for label in self.speed_decoders(experiment)]

    def speed_baseline(self, experiment: str, kv: bool = True) -> str:
        """The row label speedups are relative to under a protocol (the paper: DeepSeek MTP with K = 1)."""
        b = self.experiment(experiment).baseline
        return speed_label(b, self.num_heads(b)) + _suffix(kv)

    def speed_inputs(self, experiment: str) -> dict[str, list[str]]:
        """What a speed experiment's bench reads: its trunks, the prompt sets, its rows' heads."""
        return {
            "models": [f for m in self.speed_mains(experiment) for f in self.trunk_input(m)],
            "prompts": [layout.prompts(ps) for ps in self.s.prompt_sets],
            "runs": sorted({self.final_model(r["run"]) for r in self.speed_rows(experiment)}),
        }

    # ------------------------------------------------------------------------------------------------ experiments

    def experiment(self, name: str) -> Any:
        """What table or figure `name` shows (`papers.p2.tables` / `figures`; None: not configured)."""
        return getattr(self.s.tables if name in TABLES else self.s.figures, name)

    def configured(self, name: str) -> bool:
        """Whether table or figure `name` is configured (its section names what it shows)."""
        return self.experiment(name) is not None or name in ("table3", "fig6")

    def experiment_runs(self, name: str) -> list[str]:
        """The runs a table or figure shows (their trainings and acceptance jobs)."""
        spec = self.experiment(name)
        f = vars(spec) if spec else {}
        runs = [r for b in f.get("blocks") or [] for r in b.runs] + list(f.get("runs") or [])
        runs += [r.run for r in f.get("rows") or []] + [f.get("run"), f.get("baseline")]
        return [r for r in dict.fromkeys(runs) if r]

    def experiment_replicates(self, name: str) -> list[str]:
        """The seed replicates of the runs a table shows (`plan` module docstring; Tables 1 and 7)."""
        return [rep for r in self.experiment_runs(name) for rep in self.replicates(r)] if name in SEEDED else []

    def experiment_inputs(self, name: str) -> list[str]:
        """Every file table or figure `name` reads (its rule's inputs)."""
        runs = self.experiment_runs(name)
        if name in SPEED_EXPERIMENTS:  # Figure 5's CAR panel reads its rows' acceptance beside their speed
            extra = [p for r in runs for p in self.acceptance_outputs(r)] if name in ACCEPTANCE_SPEED else []
            return self.speed_outputs(name) + extra
        if name in CURVE_FIGURES or name == "table4":
            return [self.train_record(r) for r in runs]
        if name == "fig6":
            return [self.topn_path(self.topn_main(), "csv")]
        if name == "table3":
            return [f for m in self.trunk_models() for f in model_inputs(self.config, m)]
        sets, out = self.s.prompt_sets, []
        for r in runs:
            out += self.acceptance_outputs(r) + [self.validation_path(r)]
            out += [self.reference_path(self.main_of(r), ps) for ps in sets]
        for r in self.experiment_replicates(name):
            out += [self.result(r, ps, setting_label(self.num_heads(r))) for ps in sets]
        if name in BASE_REFERENCES and self.pretrained_base():
            out += [self.reference_path(self.s.model, ps) for ps in sets]
        return list(dict.fromkeys(out))

    def trunk_models(self) -> list[str]:
        """The models the runs start from, the section's model first (Table 3's columns)."""
        return list(dict.fromkeys([self.s.model, *(self.run(r).model for r in self.run_names())]))

    def topn_main(self) -> str:
        """The trunk of Figure 6 (`figures.fig6.run`'s, else the section's model)."""
        run = self.s.figures.fig6 and self.s.figures.fig6.run
        return self.main_of(run) if run else self.s.model

    def mains(self) -> list[str]:
        """Mains whose references some table or figure reads."""
        out = []
        for n in (*TABLES, *FIGURES):
            out += [self.main_of(r) for r in self.experiment_runs(n) + self.experiment_replicates(n)]
            if n in BASE_REFERENCES and self.pretrained_base():
                out.append(self.s.model)
            if n == "fig6":
                out.append(self.topn_main())
        return list(dict.fromkeys(out))

    # ---------------------------------------------------------------------------------------------------- report

    def run_files(self, run: str) -> dict[str, Any]:
        """What the report reads of one run: title, K, main, its acceptance files by set and D, validation,
        its main's references, its training record, its seed replicates (their names)."""
        plan, main, sets = self.run(run), self.main_of(run), self.s.prompt_sets
        return {
            "title": plan.title,
            "heads": self.num_heads(run),
            "main": main,
            "acceptance": {ps: {str(d): self.result(run, ps, setting_label(d)) for d in self.depths()} for ps in sets},
            "validation": self.validation_path(run),
            "reference": {ps: self.reference_path(main, ps) for ps in sets},
            "record": self.train_record(run),
            "method": plan.method,
            "train": plan.train,
            "replicates": self.replicates(run),
        }

    def report_inputs(self, name: str) -> dict[str, list[str]]:
        return {"files": self.experiment_inputs(name)}

    def report_params(self, name: str) -> dict[str, Any]:
        """Everything table or figure `name` shows, JSON-ready (the report script's `params.spec`; `spec`: its
        section as written, defaults filled)."""
        model, sets = self.s.model, self.s.prompt_sets
        kind = "tables" if name in TABLES else "figures"
        out: dict[str, Any] = {
            "name": name,
            "spec": self.section[kind].get(name) or {},
            "prompt_sets": list(sets),
            "runs": {r: self.run_files(r) for r in self.experiment_runs(name) + self.experiment_replicates(name)},
            "base": {
                "model": model,
                "reference": {ps: self.reference_path(model, ps) for ps in sets} if self.pretrained_base() else None,
            },
        }
        if name in SPEED_EXPERIMENTS:
            rows = self.speed_rows(name)
            out["speed"] = {
                "rows": [{**r, "protocol": PROTOCOLS[r["kv_cache"]]} for r in rows],
                "paths": {r["label"]: self.speed_path(name, r["label"]) for r in rows},
                "baseline": self.speed_baseline(name),
            }
        if name == "fig6":
            out["topn"] = self.topn_path(self.topn_main(), "csv")
            out["base"]["model"] = self.topn_main()
        if name == "table3":
            out["models"] = [
                {
                    "name": m,
                    "model_spec": model_spec(self.config, m),
                    "model_dir": model_dir(self.config, m),
                    "heads": sorted({self.num_heads(r) for r in self.run_names() if self.run(r).model == m}),
                }
                for m in self.trunk_models()
            ]
        return out
