"""``python -m spectally.commands`` (and ``python -m spectally.cli``, its earlier path)."""

from spectally.commands import main

main()
