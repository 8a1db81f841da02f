"""One handler per A2A operation and protocol version (`v03.py`, `v10.py`), the `Call` every handler gets
(`calls.py`) and the checks each message passes first (`admission.py`).

Wire-agnostic, so JSON-RPC, REST and gRPC run the same code: the bindings decode and encode around it. It may
import `deps`, the card (some operations answer with it) and the shared leaves; not a binding or the edge."""
