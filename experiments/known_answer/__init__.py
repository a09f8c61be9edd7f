"""The known-answer suite of the model organism: the checks (checks), what each reads from the
capture (capture), the n each expects, counted from the benchmark and the stages' settings
(counts), the steering checks (steering), partial image-span patching (span), and the row every
check writes (rows)."""
