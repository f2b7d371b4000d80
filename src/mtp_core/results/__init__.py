"""Result records and what is built from them: `write` (the record every job writes), `read` (result files read back,
checked, as frames), `tables` and `figures` (CSV + markdown, PNG + PDF; the foundation's figures), `build` (the
foundation's tables), `job_times` (a run's job costs from its benchmark files) and `page` (a run's dated results
page).

The names below load their module on first use (PEP 562): a job that writes its result imports no pandas.
"""

from ..io import lazy_exports

_WHERE = {
    **dict.fromkeys(["TABLES", "make_table"], "build"),
    **dict.fromkeys(["ResultFileError", "category_frame", "format_params", "load_results", "metrics_frame"], "read"),
    **dict.fromkeys(["FIGURES", "decoding_speed_figure", "grouped_bars", "make_figure", "new_figure", "save_figure",
                     "scatter_tradeoff", "style"], "figures"),
    **dict.fromkeys(["Table", "decoding_table", "evaluation_table", "format_pm", "pivot_pm", "write_table",
                     "write_table_files"], "tables"),
}  # fmt: skip
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)
