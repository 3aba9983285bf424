"""What the tests and the benchmarks share (neither imports the other): the CLI path (cli), plc-sim and
serve as processes with a PLC-side client (plc), the node-opcua PLC stand-in (standin_plc), agent
factories (agents), the written-out off-policy steps against a reference (written_out), tiny training
runs, their exports and run-directory helpers (runs), fuzz mutations (fuzz), the docs' shell blocks
(doc_blocks), a short env for Ray workers (short_envs) and a faulty model child (faulty_model_process).
Not installed with the wheel: it runs from a source checkout (the repository root on sys.path).
"""
