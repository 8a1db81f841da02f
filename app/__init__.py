"""The server: its rooms, what lives in each and what each may import, are in docs/ARCHITECTURE.md."""
