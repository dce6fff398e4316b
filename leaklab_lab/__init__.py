"""The leaklab lab: the catalog's cases, their expectations, the catalog, curves, results files,
compare and the benchmarks. It uses the tool (``leaklab``); the tool never imports it."""
