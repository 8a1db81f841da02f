"""Domain model, wire codecs and A2A errors. Imports nothing else of ours."""
