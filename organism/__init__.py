"""A known-answer model organism: a small Llama trained here to solve the selection task.

See README ("The model organism"). `organism` names it wherever a model is named.
"""
