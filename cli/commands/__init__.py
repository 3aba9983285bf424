"""One module per subcommand, each with its parser (`add_parser`) next to its handler (`run`)."""

COMMANDS = (
    "train",
    "tune",
    "export",
    "evaluate",
    "serve",
    "trace",
    "replay",
    "status",
    "plc_sim",
    "certs",
    "bench",
    "package",
    "mender",
)
