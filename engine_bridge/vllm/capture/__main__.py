"""``python -m spectally.engine_bridge.vllm.capture``: the capture matrix (``capture.main``),
the command this path ran when ``capture`` was a module."""

import sys

from spectally.engine_bridge.vllm.capture.capture import main

sys.exit(main())
