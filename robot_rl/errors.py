"""The one base class of the mistakes a user can make (a bad key, a missing file, a run that does not fit).

`robot-rl` catches only this class: each module's own error (ConfigError, DatasetError, ...) derives from it, so a
new error is printed as one line by deriving from it, not by being added to a list in the CLI. This module
imports nothing, so envs/, policies/ and real/ (which import nothing else of the project) may derive from it too.
"""


class UserError(Exception):
    """A user mistake: printed as one line, exit status 2."""
