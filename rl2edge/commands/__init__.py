"""One module per subcommand, each with its parser (`add_parser`) next to its handler (`run`)."""

COMMANDS = ("train", "export", "evaluate", "serve", "status", "plc_sim", "certs", "bench")
