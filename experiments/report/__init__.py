"""`evprobe report`: page one (summary), the detail pages (build), report.html (html) with its
folded sections (fold) and the item and pair explorer (explorer, explorer_data)."""
