"""The `rl2edge` command, on top of every other package: it imports them all, and none of them imports it.

- entry.py: the console script (it blocks SIGHUP for `serve` before anything else loads).
- app.py: the parser, the logging set-up and the one-line errors; `main(argv)` runs a command as the
  console script does.
- commands/: one module per subcommand, its parser next to its handler.

This file imports nothing, so that entry.py runs first: `python -m rl2edge.cli` is the console script.
"""
