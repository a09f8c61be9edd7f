"""`evprobe patching`: the job over the benchmark's image pairs (job) and its heatmaps (figures);
the rows and tables are analysis.patching's."""
