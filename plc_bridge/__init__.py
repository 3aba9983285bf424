"""OPC UA bridge to the PLC (node map, security, reconnect) and the simulated PLC.

Imports `runtime` and asyncua, never torch or tensorflow.
"""
