"""The one error type for bad input: a one-line message naming file, line, field and the fix.

Every reader and every command raises it for what the user can mend (a file, a flag, a folder);
the CLI prints its message and exits with status 2.
"""


class InputError(ValueError):
    """Bad input; the message names the file, line and field, and the fix."""
