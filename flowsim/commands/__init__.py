"""The toolkit of the tasks' command modules: options with their allowed values, the parts every command shares
(the run's record, figures, portrait, comparison, verify) and tables.

Imports run one way: a task's `cli` module imports this toolkit, and the assembler, `flowsim.cli`, imports the
tasks (`flowsim.tasks.TASKS`) and this toolkit; nothing here imports a task or the assembler.
"""
