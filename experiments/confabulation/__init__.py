"""`evprobe confabulation`: seed 002's confabulation types of void failures (appendix O.1-O.2).

The subpackage: `classify` (the taxonomy prompt, the strict reader of the classifier's JSON, the
sample, the rates and the command).
"""
