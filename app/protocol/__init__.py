"""The domain model (`model.py`, `events.py`, `usage.py`), the wire codecs of both versions, and the A2A
errors with every code a binding answers them with (`errors.py`). It imports nothing else of ours, so every
room may import it."""
