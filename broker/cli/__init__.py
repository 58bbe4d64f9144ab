"""The command-line programs: ``ottermq`` (run the broker, or a tool subcommand), its admin commands
over the management API, and the dead-letter archive tools. They sit on top of every other part of
``ottermq.broker`` and nothing imports them."""
