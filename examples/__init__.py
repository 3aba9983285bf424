"""Example plants written for rl2edge, each a Gymnasium env package."""
