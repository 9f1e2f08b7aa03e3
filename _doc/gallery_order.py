"""The order of the gallery's examples: the order a newcomer reads them in.

sphinx-gallery imports this by name (``within_subsection_order``); an
example missing from :data:`ORDER` comes last, by file name.
"""

from __future__ import annotations

ORDER = [
    # Getting started: one task each
    "plot_realign.py",
    "plot_dedup.py",
    "plot_inspect_verify.py",
    "plot_hf_cache.py",
    "plot_shards.py",
    "plot_shared_variant.py",
    "plot_edit_without_loading.py",
    # Benchmarks: the jobs first, then the details
    "plot_align_external_data_streaming.py",
    "plot_save_model_with_shared_external_data.py",
    "plot_deduplicate_external_data.py",
    "plot_convert_float16.py",
    "plot_onnxruntime_loading_memory.py",
    "plot_load_save_time.py",
    "plot_threads_load_save.py",
    "plot_profile_external_data_save.py",
]


class ReadingOrder:
    """Sort key of the examples of one gallery folder (``src_dir``)."""

    def __init__(self, src_dir: str) -> None:
        self.src_dir = src_dir

    def __call__(self, filename: str) -> tuple[int, str]:
        return (ORDER.index(filename) if filename in ORDER else len(ORDER), filename)

    def __repr__(self) -> str:
        return "ReadingOrder"
